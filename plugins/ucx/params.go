package ucx

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/custody-dev/custody/internal/ucxtls"
	"github.com/custody-dev/custody/sdk"
)

// defaultTLS is used when neither the tls parameter nor UCX_TLS in the
// environment names the transports: TCP works between any two hosts and
// reports a dead peer.
const defaultTLS = "tcp"

// tcpSegments are the TCP transport's segment sizes set unless the
// parameters or the environment set them: UCX's defaults (8 KiB to send, 64
// KiB to receive) hold a current UCX's TCP transport to about a third of
// what it does with these (custody bench bw, 1 MiB over tcp on UCX 1.22:
// 1,060 against 3,500 MiB/s WRITE and 1,080 against 3,640 READ, one run).
// The segments come from UCX's buffer pools, so each one in use costs that
// much memory. On UCX 1.13 they change nothing measured (about 1,050 MiB/s with them or without).
var tcpSegments = map[string]string{"TCP_TX_SEG_SIZE": "256k", "TCP_RX_SEG_SIZE": "256k"}

// config is an agent's parsed Open parameters.
type config struct {
	// tls is the UCX_TLS list, e.g. "tcp" or "posix,sysv,cma".
	tls string
	// errPeer is whether endpoints use UCP_ERR_HANDLING_MODE_PEER. It is
	// on unless a shared-memory transport (posix, sysv, cma) is selected,
	// because UCX 1.13 cannot build an endpoint in peer mode over them.
	errPeer bool
	// watchPeers is whether the agent watches peer processes itself: on
	// when errPeer is off, since UCX then reports no peer failure.
	watchPeers bool
	// ucx are further UCX settings (names without UCX_), applied after tls.
	ucx map[string]string
}

// parseParams reads Open's parameters:
//
//	tls=LIST      UCX_TLS for this agent (default: $UCX_TLS, else tcp)
//	UCX_NAME=V    any other UCX setting, passed to UCX unchanged (UCX
//	              refuses bad values at Open; it ignores unknown names)
//
// and sets tcpSegments where neither they nor the environment do.
// An unknown key is INVALID_ARGUMENT.
func parseParams(p map[string]string) (config, error) {
	c := config{tls: envTLS(), ucx: map[string]string{}}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := p[k]
		switch {
		case k == "tls":
			if strings.TrimSpace(v) == "" {
				return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: parameter tls is empty; name UCX transports, e.g. tls=tcp or tls=posix,sysv,cma")
			}
			c.tls = v
		case strings.HasPrefix(k, "UCX_") && len(k) > len("UCX_"):
			if k == "UCX_TLS" {
				return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: parameter UCX_TLS: use tls=%s instead", v)
			}
			c.ucx[strings.TrimPrefix(k, "UCX_")] = v
		default:
			return config{}, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: unknown parameter %q; known: tls, UCX_<SETTING>", k)
		}
	}
	for k, v := range tcpSegments {
		if _, set := c.ucx[k]; !set && os.Getenv("UCX_"+k) == "" {
			c.ucx[k] = v
		}
	}
	c.errPeer = !ucxtls.UsesShm(c.tls)
	c.watchPeers = !c.errPeer
	return c, nil
}

// envTLS is UCX_TLS from the environment, else defaultTLS.
func envTLS() string {
	if v := strings.TrimSpace(os.Getenv("UCX_TLS")); v != "" {
		return v
	}
	return defaultTLS
}

// settings returns the UCX settings to apply, TLS first.
func (c config) settings() (keys, vals []string) {
	keys = append(keys, "TLS")
	vals = append(vals, c.tls)
	names := make([]string, 0, len(c.ucx))
	for k := range c.ucx {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		keys = append(keys, k)
		vals = append(vals, c.ucx[k])
	}
	return keys, vals
}

func (c config) String() string {
	mode := "peer"
	if !c.errPeer {
		mode = "none"
	}
	return fmt.Sprintf("tls=%s err_mode=%s", c.tls, mode)
}
