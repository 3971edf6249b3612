package ucx

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// remoteDesc is a remote dlist's descriptor resolved at Prepare: the
// remote address of its first byte and its region's rkey. A remote dlist's
// Value holds one per descriptor; a local one needs none (its region's
// mapping and memory handle are the Book's Region.Value).
type remoteDesc struct {
	addr uint64
	rkey cRkey
}

// PrepareDescriptors prepares local (Peer == 0) or remote dlists; the Book
// checks them, and a remote one is resolved to remote addresses and rkeys
// here, once, so that Post looks nothing up.
func (t *Transport) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	out := make([]sdk.DlistResult, len(lists))
	err := t.do(ctx, "PrepareDescriptors", len(lists), func(a *agent) {
		for i, spec := range lists {
			out[i].ID, out[i].Err = a.book.Prepare(spec, resolve)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// resolve sets a remote dlist's native descriptors.
func resolve(d *dlist) error {
	if d.Local() {
		return nil
	}
	rkeys := d.Peer.Value.rkeys
	d.Value = make([]remoteDesc, len(d.Descs))
	for j, desc := range d.Descs {
		r := rkeys[desc.Region] // present: the Book found it in the peer's regions
		d.Value[j] = remoteDesc{addr: r.addr + desc.Offset, rkey: r.rkey}
	}
	return nil
}

// ReleaseDescriptors releases dlists. A dlist an unreleased handle uses is
// BUSY and stays valid.
func (t *Transport) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	out := make([]error, len(ids))
	err := t.do(ctx, "ReleaseDescriptors", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.ReleaseDlist(id, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
