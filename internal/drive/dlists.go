package drive

import (
	"context"
	"errors"
	"fmt"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin/agent"
)

// Lists are a local and a remote dlist of one agent, prepared together.
type Lists struct {
	Local, Remote sdk.DlistID
}

// Prepare prepares ld as a's local dlist and rd as a remote one on a's
// peer, in one call.
func Prepare(ctx context.Context, a *agent.Agent, ld, rd []sdk.Descriptor) (Lists, error) {
	res, err := a.Transport.PrepareDescriptors(ctx, []sdk.DlistSpec{{Descriptors: ld}, {Peer: a.Peer, Descriptors: rd}})
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("transport returned %d dlists for 2", len(res))
	}
	if err == nil {
		err = errors.Join(res[0].Err, res[1].Err)
	}
	if err != nil {
		return Lists{}, fmt.Errorf("PrepareDescriptors: %w", err)
	}
	return Lists{Local: res[0].ID, Remote: res[1].ID}, nil
}

// Release releases both dlists in one call.
func (l Lists) Release(ctx context.Context, a *agent.Agent) error {
	errs, err := a.Transport.ReleaseDescriptors(ctx, []sdk.DlistID{l.Local, l.Remote})
	if err = errors.Join(append(errs, err)...); err != nil {
		return fmt.Errorf("ReleaseDescriptors: %w", err)
	}
	return nil
}

// Singles are n transfers of op, transfer i moving descriptor i of the
// local dlist to or from descriptor i of the remote one.
func (l Lists) Singles(op sdk.Op, n int) []sdk.PostSpec {
	idx := make([]uint32, n)
	specs := make([]sdk.PostSpec, n)
	for i := range specs {
		idx[i] = uint32(i)
		specs[i] = sdk.PostSpec{Op: op, Local: l.Local, LocalIndices: idx[i : i+1], Remote: l.Remote, RemoteIndices: idx[i : i+1]}
	}
	return specs
}
