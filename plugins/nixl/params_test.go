package nixl

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// ucxParams stands for the UCX plugin's getPluginParams.
func ucxParams(string) ([]string, error) {
	return []string{"ucx_devices", "num_workers", errModeKey}, nil
}

func TestParams(t *testing.T) {
	t.Setenv("UCX_TLS", "")
	c, err := parseParams(map[string]string{}, ucxParams)
	if err != nil || c.backend != "UCX" || c.tls != "tcp" || c.errNone || len(c.params) != 0 || c.progressDelay != time.Millisecond {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	c, err = parseParams(map[string]string{"tls": "posix,sysv,cma"}, ucxParams)
	if err != nil || !c.errNone || c.params[errModeKey] != "none" || c.progressDelay != 0 || c.delaySet {
		t.Fatalf("shared memory must default to error handling none and a spinning progress thread: %+v, %v", c, err)
	}
	c, err = parseParams(map[string]string{"backend": "UCX", errModeKey: "peer", "num_workers": "1", "engine_config": "RNDV_THRESH=8k"}, ucxParams)
	if err != nil || c.errNone || len(c.params) != 3 {
		t.Fatalf("backend params pass through: %+v, %v", c, err)
	}
	c, err = parseParams(map[string]string{"progress_delay": "0s"}, ucxParams)
	if err != nil || c.progressDelay != 0 || !c.delaySet || len(c.params) != 0 {
		t.Fatalf("progress_delay is the transport's, not the backend's: %+v, %v", c, err)
	}
	c, err = parseParams(map[string]string{errModeKey: "none"}, ucxParams)
	if err != nil || !c.errNone {
		t.Fatalf("error handling none over tcp: %+v, %v", c, err)
	}
}

func TestShmProgressDelay(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		ok           bool
		want         time.Duration
	}{
		{1, 13, true, 0}, {1, 22, true, 0}, {1, 23, true, time.Millisecond},
		{1, 24, true, time.Millisecond}, {2, 0, true, time.Millisecond}, {0, 0, false, 0},
	} {
		if got := shmProgressDelay(c.major, c.minor, c.ok); got != c.want {
			t.Errorf("UCX %d.%d (known %v): %v, want %v", c.major, c.minor, c.ok, got, c.want)
		}
	}
}

func TestParamsRefused(t *testing.T) {
	for name, p := range map[string]map[string]string{
		"unknown key":   {"color": "blue"},
		"empty backend": {"backend": ""},
		"empty tls":     {"tls": " "},
		"bad delay":     {"progress_delay": "soon"},
		"negative":      {"progress_delay": "-1ms"},
	} {
		if _, err := parseParams(p, ucxParams); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
			t.Errorf("%s: got %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// The known parameters come from the backend named.
	unknownBackend := func(b string) ([]string, error) {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "no backend %s", b)
	}
	if _, err := parseParams(map[string]string{"backend": "NOPE", "x": "1"}, unknownBackend); sdk.CodeOf(err) != sdk.CodeInvalidArgument {
		t.Errorf("unknown backend: got %v", err)
	}
}
