//go:build nixl

package nixl

import (
	"fmt"
	"os"
	"unsafe"
)

// Direct is a bare nixlAgent, driven without the contract, its bookkeeping
// or a process boundary: the reference that custody bench holds the
// transport against (cmd/custody-nixl-reference). It is not safe for
// concurrent use.
type Direct struct {
	n   *native
	hs  []unsafe.Pointer // Status's scratch
	sts []int32
}

// DirectDlist is a prepared NIXL dlist; DirectReq a NIXL transfer request.
type (
	DirectDlist struct{ h unsafe.Pointer }
	DirectReq   struct{ h unsafe.Pointer }
)

// OpenDirect creates an agent named name with a backend configured as
// Open's parameters say (backend, tls and backend parameters).
func OpenDirect(name string, params map[string]string) (*Direct, error) {
	cfg, err := parseParams(params, pluginParams)
	if err != nil {
		return nil, err
	}
	if cfg.backend == "UCX" {
		if err := os.Setenv("UCX_TLS", cfg.tls); err != nil {
			return nil, err
		}
	}
	n, st, msg := openNative(name, cfg.delay(), cfg.backend, cfg.params)
	if n == nil {
		return nil, fmt.Errorf("nixl: creating agent %q with %s: %s (%v)", name, cfg, msg, st)
	}
	return &Direct{n: n}, nil
}

// Close ends the agent.
func (d *Direct) Close() { d.n.close() }

func check(what string, st status) error {
	if st != statusSuccess {
		return fmt.Errorf("nixl: %s returned %v", what, st)
	}
	return nil
}

// Register registers b (DRAM) with the agent's backend.
func (d *Direct) Register(b []byte) error {
	return check("registerMem", d.n.register(uint64(uintptr(unsafe.Pointer(&b[0]))), uint64(len(b))))
}

// Deregister undoes Register.
func (d *Direct) Deregister(b []byte) error {
	return check("deregisterMem", d.n.deregister(uint64(uintptr(unsafe.Pointer(&b[0]))), uint64(len(b))))
}

// Metadata is getLocalMD's blob.
func (d *Direct) Metadata() ([]byte, error) {
	md, st := d.n.localMD()
	return md, check("getLocalMD", st)
}

// Load loads a peer's getLocalMD blob and returns its agent name.
func (d *Direct) Load(md []byte) (string, error) {
	name, st := d.n.loadMD(md)
	return name, check("loadRemoteMD", st)
}

// Invalidate drops a loaded peer.
func (d *Direct) Invalidate(agent string) error {
	return check("invalidateRemoteMD", d.n.invalidate(agent))
}

// Prep prepares a dlist of DRAM ranges at addrs with lens: local when
// agent is "", else of that loaded peer.
func (d *Direct) Prep(agent string, addrs, lens []uint64) (*DirectDlist, error) {
	h, st := d.n.prep(agent, addrs, lens)
	if err := check("prepXferDlist", st); err != nil {
		return nil, err
	}
	return &DirectDlist{h: h}, nil
}

// ReleaseDlist releases a dlist.
func (d *Direct) ReleaseDlist(l *DirectDlist) error {
	return check("releasedDlistH", d.n.releaseDlist(l.h))
}

// Post makes and posts one transfer of the index pairs li, ri.
func (d *Direct) Post(write bool, l *DirectDlist, li []int32, r *DirectDlist, ri []int32) (*DirectReq, error) {
	req, st := d.n.post(write, l.h, li, r.h, ri, nil, false)
	if st != statusInProg && st != statusSuccess {
		if req != nil {
			d.n.releaseReq(req)
		}
		return nil, check("makeXferReq/postXferReq", st)
	}
	return &DirectReq{h: req}, nil
}

// Status is getXferStatus of each request, written into done (true once
// NIXL_SUCCESS); an error status is an error.
func (d *Direct) Status(reqs []*DirectReq, done []bool) error {
	d.hs, d.sts = d.hs[:0], d.sts[:0]
	for _, r := range reqs {
		d.hs = append(d.hs, r.h)
		d.sts = append(d.sts, 0)
	}
	d.n.statuses(d.hs, d.sts)
	for i, s := range d.sts {
		switch status(s) {
		case statusSuccess:
			done[i] = true
		case statusInProg:
			done[i] = false
		default:
			return fmt.Errorf("nixl: getXferStatus returned %v", status(s))
		}
	}
	return nil
}

// Release releases a finished request.
func (d *Direct) Release(r *DirectReq) error {
	return check("releaseXferReq", d.n.releaseReq(r.h))
}
