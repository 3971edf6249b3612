// Package agent starts transport agents for a program that drives them
// itself rather than through a host: the benchmarks, the smoke copy, the
// in-process references and the conformance suite. It launches (or makes)
// a transport, opens it, gives it memory (a region file, registered) and
// undoes all of it in contract order: peer, region, Close, then the
// process.
//
// It uses sdk and the process boundary (package plugin) only, so that the
// conformance suite, which may import nothing else of custody, shares it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// stopTimeout bounds Stop's calls: it runs on a fresh context, so that an
// agent can be stopped after the context that started it ended.
const stopTimeout = 30 * time.Second

// Agent is one opened transport, with at most one region and one peer
// that it frees itself (Release).
type Agent struct {
	// Name is the agent name given to Open; a peer loads it by that name.
	Name string
	// Transport is the opened transport.
	Transport sdk.Transport
	// Region is the agent's region (New), nil until it has one.
	Region *Region
	// Peer is the peer Connect loaded, 0 for none.
	Peer sdk.PeerID
	end  func()
}

// Open starts a transport with start and opens it as name with a copy of
// params (a transport may keep the map). When Open fails, what start
// started is ended and the error names the agent.
func Open(ctx context.Context, start Start, name string, params map[string]string) (*Agent, error) {
	t, end, err := start(ctx)
	if err != nil {
		return nil, err
	}
	p := maps.Clone(params)
	if p == nil {
		p = map[string]string{}
	}
	if err := t.Open(ctx, sdk.OpenRequest{Agent: name, Params: p}); err != nil {
		end()
		return nil, fmt.Errorf("Open %s: %w", name, err)
	}
	return &Agent{Name: name, Transport: t, end: end}, nil
}

// New is Open, then a region of size bytes for the agent: a new file in
// dir, registered whole. On an error nothing it made is left: the agent is
// stopped and the file removed.
func New(ctx context.Context, start Start, name string, params map[string]string, dir string, size uint64) (*Agent, error) {
	a, err := Open(ctx, start, name, params)
	if err != nil {
		return nil, err
	}
	f, err := createFile(func() (*os.File, error) { return os.CreateTemp(dir, "custody-"+name+"-*.region") }, size)
	if err != nil {
		return nil, errors.Join(err, a.Stop())
	}
	a.Region = &Region{File: f, Length: size}
	errs, err := Register(ctx, a.Transport, a.Region)
	if err == nil && len(errs) != 1 {
		err = fmt.Errorf("transport returned %d results for 1 region", len(errs))
	}
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("RegisterMemory %s: %w", name, err), a.Stop())
	}
	return a, nil
}

// Connect loads b's current metadata into a as peer b.Name (a.Peer). Call
// it once b registered the memory a will reach.
func (a *Agent) Connect(ctx context.Context, b *Agent) error {
	md, err := b.Transport.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("LocalMetadata of %s: %w", b.Name, err)
	}
	pr, err := One(a.Transport.LoadPeers(ctx, []sdk.PeerSpec{{Name: b.Name, Metadata: md}}))
	if err = FirstErr(err, pr.Err); err != nil {
		return fmt.Errorf("%s LoadPeers(%s): %w", a.Name, b.Name, err)
	}
	a.Peer = pr.ID
	return nil
}

// Release frees what the agent holds: it unloads its peer, then
// deregisters its region, and forgets each that it freed. The caller has
// released the dlists and handles it made. It goes on past a failure and
// returns every one.
func (a *Agent) Release(ctx context.Context) error {
	var errs []error
	if a.Peer != 0 {
		e, err := One(a.Transport.UnloadPeers(ctx, []sdk.PeerID{a.Peer}))
		if err = FirstErr(err, e); err != nil {
			errs = append(errs, fmt.Errorf("UnloadPeers %s: %w", a.Name, err))
		} else {
			a.Peer = 0
		}
	}
	if a.Region != nil && a.Region.ID != 0 {
		e, err := One(a.Transport.DeregisterMemory(ctx, []sdk.RegionID{a.Region.ID}))
		if err = FirstErr(err, e); err != nil {
			errs = append(errs, fmt.Errorf("DeregisterMemory %s: %w", a.Name, err))
		} else {
			a.Region.ID = 0
		}
	}
	return errors.Join(errs...)
}

// Close closes the agent, ends what started it and removes its region
// file. Call it once, after Release.
func (a *Agent) Close(ctx context.Context) error {
	var errs []error
	if err := a.Transport.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("Close %s: %w", a.Name, err))
	}
	a.end()
	if a.Region != nil {
		errs = append(errs, a.Region.Remove())
	}
	return errors.Join(errs...)
}

// Stop is Release, then Close, on a fresh context bounded by 30 s. A nil
// agent stops at once.
func (a *Agent) Stop() error {
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return errors.Join(a.Release(ctx), a.Close(ctx))
}
