package ring

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Which CPU the calling thread runs on. A spinner asks it every cpuCheck
// (spin.go), so where the CPU offers a way to read it without a system
// call (userCPU: cpu_amd64.go), and that way agrees with getcpu on every
// CPU this process may run on, it is read that way; elsewhere it is the
// getcpu system call.

var (
	cpuOnce sync.Once
	cpuRead = getcpu
)

// currentCPU returns the number of the CPU the calling thread runs on, and
// false when it cannot tell. The thread may move at any time after, so
// the answer is a hint.
func currentCPU() (uint32, bool) {
	cpuOnce.Do(func() {
		if r := userCPU(); r != nil {
			cpuRead = r
		}
	})
	return cpuRead()
}

// getcpu asks the kernel (getcpu(2)).
func getcpu() (uint32, bool) {
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return 0, false
	}
	return cpu, true
}

// maxAgreeCPUs bounds how many CPUs agrees tries, so that a process on a
// large machine does not pay a migration to each of them.
const maxAgreeCPUs = 16

// agrees reports whether read tells the CPU that getcpu tells, on each of
// the CPUs this process may run on (up to maxAgreeCPUs): the calling
// thread moves to each in turn, and goes back to where it may run after.
func agrees(read func() (uint32, bool)) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var allowed unix.CPUSet
	if unix.SchedGetaffinity(0, &allowed) != nil {
		return false
	}
	defer func() { _ = unix.SchedSetaffinity(0, &allowed) }()
	tried := 0
	for c := 0; c < len(allowed)*64 && tried < maxAgreeCPUs; c++ {
		if !allowed.IsSet(c) {
			continue
		}
		var one unix.CPUSet
		one.Set(c)
		if unix.SchedSetaffinity(0, &one) != nil {
			continue
		}
		before, ok1 := getcpu()
		got, ok2 := read()
		after, ok3 := getcpu()
		if !ok1 || !ok2 || !ok3 || before != after || got != before {
			return false
		}
		tried++
	}
	return tried > 0
}
