package ring

// On x86-64, Linux keeps each CPU's number in the low 12 bits of that
// CPU's TSC_AUX register (its NUMA node above them), which user space
// reads with RDPID or RDTSCP; the vDSO's getcpu reads it the same way. A
// hypervisor may leave TSC_AUX unset: agrees checks each reader against
// getcpu before it is used.

// cpuAuxMask takes the CPU's number out of TSC_AUX.
const cpuAuxMask = 1<<12 - 1

// offered says which of the instructions that read TSC_AUX the CPU
// offers (CPUID).
func offered() (hasRDPID, hasRDTSCP bool) {
	_, _, ecx7, _ := cpuid(7, 0)
	maxExt, _, _, _ := cpuid(0x80000000, 0)
	var edxExt uint32
	if maxExt >= 0x80000001 {
		_, _, _, edxExt = cpuid(0x80000001, 0)
	}
	return ecx7&(1<<22) != 0, edxExt&(1<<27) != 0 // CPUID.(EAX=7,ECX=0):ECX.RDPID[bit 22], CPUID.80000001H:EDX.RDTSCP[bit 27]
}

// userCPU returns the first reader of TSC_AUX that the CPU offers and
// that agrees with getcpu, or nil.
func userCPU() func() (uint32, bool) {
	hasRDPID, hasRDTSCP := offered()
	readers := []struct {
		offered bool
		read    func() uint32
	}{{hasRDPID, rdpid}, {hasRDTSCP, rdtscpAux}}
	for _, r := range readers {
		read := r.read
		f := func() (uint32, bool) { return read() & cpuAuxMask, true }
		if r.offered && agrees(f) {
			return f
		}
	}
	return nil
}

// Implemented in cpu_amd64.s.

// cpuid executes CPUID with EAX=leaf and ECX=sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// rdpid returns TSC_AUX (RDPID).
func rdpid() uint32

// rdtscpAux returns TSC_AUX (RDTSCP, whose time stamp it drops).
func rdtscpAux() uint32
