package main

import (
	"io"
	"testing"
)

// QEMU's own reports of KVM failing, as QEMU prints them, must send the boot to TCG; its other
// output must not.
func TestKVMWatchSeesQEMUsKVMFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		failed bool
	}{
		{"refused MSR, then abort", []string{
			"qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n",
			"qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.\n",
		}, true},
		{"internal error split across writes", []string{"KVM inter", "nal error. Suberror: 1\n"}, true},
		{"a warning only", []string{"qemu-system-x86_64: warning: host doesn't support requested feature: CPUID.80000001H:ECX.svm [bit 2]\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &kvmWatch{out: io.Discard, failed: make(chan struct{})}
			for _, p := range tc.writes {
				if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", p, n, err)
				}
			}
			select {
			case <-w.failed:
				if !tc.failed {
					t.Fatal("failed closed on output that is not a KVM failure")
				}
			default:
				if tc.failed {
					t.Fatal("failed still open after QEMU reported that KVM failed")
				}
			}
		})
	}
}
