// Package proccost counts what processes cost while a benchmark runs: time
// on a CPU and context switches, summed over every thread as /proc counts
// them (Threads, Tree), and the system calls they make (Syscalls, counted by
// the kernel's raw_syscalls:sys_enter tracepoint). A Meter takes all three
// over a window for a set of processes.
package proccost
