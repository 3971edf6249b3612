package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Mode is a rank's effective mode: everything the ranks of one engine must
// agree on before any transport is built (rule 9). Two ranks agree
// when their canonical encodings are equal; Diff names what differs.
type Mode struct {
	// Transport is the transport's name (fake, ucx, ...).
	Transport string `json:"transport"`
	// ContractMajor is the transport contract's major version.
	ContractMajor uint32 `json:"contract_major"`
	// Capabilities are what the transport claims.
	Capabilities Capabilities `json:"capabilities"`
	// FenceScope is what killing the transport process stops (docs/fencing.md).
	FenceScope sdk.FenceScope `json:"fence_scope"`
	// Pools are the pools and their geometry; order does not matter.
	Pools []PoolMode `json:"pools"`
	// EscalationPolicy and EscalationCap are the bounded hold (rule 8).
	EscalationPolicy string        `json:"escalation_policy"`
	EscalationCap    time.Duration `json:"escalation_cap"`
}

// Capabilities mirrors sdk.Capabilities with a stable encoding.
type Capabilities struct {
	Remote        bool `json:"remote"`
	Local         bool `json:"local"`
	Notifications bool `json:"notifications"`
	Cancel        bool `json:"cancel"`
	Events        bool `json:"events"`
}

// CapabilitiesOf converts a transport's claims.
func CapabilitiesOf(c sdk.Capabilities) Capabilities {
	return Capabilities{Remote: c.Remote, Local: c.Local, Notifications: c.Notifications, Cancel: c.Cancel, Events: c.Events}
}

// PoolMode is one pool's geometry. The engine names the same block ids on
// every rank, so block size and count must both match.
type PoolMode struct {
	Name      string `json:"name"`
	BlockSize uint64 `json:"block_size"`
	Blocks    uint64 `json:"blocks"`
}

// maxPools bounds a Mode so that its encoding stays small.
const maxPools = 256

// Validate refuses a Mode no rank could run, naming the field.
func (m Mode) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("mode: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if m.Transport == "" || len(m.Transport) > MaxNameLen {
		bad("transport", "%q: want 1-%d bytes", m.Transport, MaxNameLen)
	}
	if m.ContractMajor == 0 {
		bad("contract_major", "must be set (this build speaks %d)", sdk.ContractMajor)
	}
	if len(m.Pools) > maxPools {
		bad("pools", "%d pools: at most %d", len(m.Pools), maxPools)
	}
	seen := map[string]bool{}
	for i, p := range m.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		switch {
		case p.Name == "" || len(p.Name) > MaxNameLen:
			bad(f+".name", "%q: want 1-%d bytes", p.Name, MaxNameLen)
		case seen[p.Name]:
			bad(f+".name", "pool %q is listed twice", p.Name)
		}
		seen[p.Name] = true
		if p.BlockSize == 0 {
			bad(f+".block_size", "must be positive")
		}
		if p.Blocks == 0 {
			bad(f+".blocks", "must be positive")
		}
	}
	if m.EscalationCap < 0 {
		bad("escalation_cap", "must be positive, got %v", m.EscalationCap)
	}
	return errors.Join(errs...)
}

// Canonical returns m with its pools sorted by name, so that equal modes
// encode to equal bytes whatever order the configuration listed them in.
func (m Mode) Canonical() Mode {
	pools := append([]PoolMode(nil), m.Pools...)
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	m.Pools = pools
	return m
}

// Encode is m's deterministic encoding: JSON of the canonical form (struct
// fields in declaration order, pools sorted by name).
func (m Mode) Encode() ([]byte, error) {
	return json.Marshal(m.Canonical())
}

// Difference is one field on which a rank's mode differs from the
// reference rank's.
type Difference struct {
	Field string
	// Want is the reference rank's value, Got the other rank's.
	Want, Got string
}

// Diff lists the fields on which got differs from want, in a fixed order.
// An empty result means the modes agree.
func Diff(want, got Mode) []Difference {
	var d []Difference
	add := func(field string, w, g any) {
		ws, gs := fmt.Sprint(w), fmt.Sprint(g)
		if ws != gs {
			d = append(d, Difference{Field: field, Want: ws, Got: gs})
		}
	}
	add("transport", want.Transport, got.Transport)
	add("contract_major", want.ContractMajor, got.ContractMajor)
	add("capabilities.remote", want.Capabilities.Remote, got.Capabilities.Remote)
	add("capabilities.local", want.Capabilities.Local, got.Capabilities.Local)
	add("capabilities.notifications", want.Capabilities.Notifications, got.Capabilities.Notifications)
	add("capabilities.cancel", want.Capabilities.Cancel, got.Capabilities.Cancel)
	add("capabilities.events", want.Capabilities.Events, got.Capabilities.Events)
	add("fence_scope", want.FenceScope, got.FenceScope)
	w, g := poolMap(want.Pools), poolMap(got.Pools)
	for _, name := range unionKeys(w, g) {
		wp, wok := w[name]
		gp, gok := g[name]
		f := "pools[" + strconv.Quote(name) + "]"
		switch {
		case !gok:
			d = append(d, Difference{Field: f, Want: "present", Got: "absent"})
		case !wok:
			d = append(d, Difference{Field: f, Want: "absent", Got: "present"})
		default:
			add(f+".block_size", wp.BlockSize, gp.BlockSize)
			add(f+".blocks", wp.Blocks, gp.Blocks)
		}
	}
	add("escalation_policy", want.EscalationPolicy, got.EscalationPolicy)
	add("escalation_cap", want.EscalationCap, got.EscalationCap)
	return d
}

func poolMap(ps []PoolMode) map[string]PoolMode {
	m := make(map[string]PoolMode, len(ps))
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func unionKeys(a, b map[string]PoolMode) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// ModeMismatchError is a rank whose effective mode differs from the
// reference rank's (rank 0). Every rank computes the same errors from the
// same records, so every rank fails startup with the same message.
type ModeMismatchError struct {
	Engine  string
	Rank    int
	RefRank int
	Diffs   []Difference
}

func (e *ModeMismatchError) Error() string {
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = fmt.Sprintf("%s: rank %d has %s, rank %d has %s", d.Field, e.RefRank, d.Want, e.Rank, d.Got)
	}
	return fmt.Sprintf("engine %q: rank %d's effective mode differs from rank %d's: %s; start every rank with the same transport, pools and escalation settings",
		e.Engine, e.Rank, e.RefRank, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrModeMismatch) hold, and ErrMixedContract too
// when the contract major versions differ.
func (e *ModeMismatchError) Is(target error) bool {
	if target == ErrModeMismatch {
		return true
	}
	if target == ErrMixedContract {
		for _, d := range e.Diffs {
			if d.Field == "contract_major" {
				return true
			}
		}
	}
	return false
}
