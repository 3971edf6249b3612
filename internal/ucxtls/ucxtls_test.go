package ucxtls

import "testing"

func TestUsesShm(t *testing.T) {
	for tls, want := range map[string]bool{
		"tcp": false, "tcp,self": false, "": false,
		"posix,sysv,cma": true, "tcp, shm": true, "^sm": true, "all": true, "rc,cma": true,
	} {
		if got := UsesShm(tls); got != want {
			t.Errorf("UsesShm(%q) = %v, want %v", tls, got, want)
		}
	}
}
