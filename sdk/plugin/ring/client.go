package ring

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Host timing.
const (
	// waitSpin is how long a caller whose call found the pump awake
	// drains the completion ring itself before it blocks for its result
	// (Client.waitSpin).
	waitSpin = 200 * time.Microsecond
	// readerSpin is how long the reader goroutine keeps looking after
	// the last completion before it sleeps.
	readerSpin = 20 * time.Microsecond
	// pollGap: Polls at most this far apart come from a caller
	// polling in a loop, which drains the completion ring itself (the
	// reader naps meanwhile).
	pollGap = 20 * time.Microsecond
	// fenceWait bounds how long a call that found the rings broken waits
	// for the fenced process to be gone.
	fenceWait = 10 * time.Second
)

// epoch is the origin of clock.
var epoch = time.Now()

// clock is a monotonic clock in nanoseconds, never 0.
func clock() int64 { return int64(time.Since(epoch)) + 1 }

// Client is the host's side of one mapping. NewClient starts its reader;
// from then on Post, Release and SendNotifications travel through the
// submission ring and wait for their results in the completion ring,
// within the call's deadline, and Poll, Events and Notifications answer
// from what the completion ring brought (client_calls.go). Its methods are
// safe for concurrent use.
//
// Whoever waits drains the completion ring itself (a caller spinning for
// its result, Poll); a reader goroutine drains it when nobody does, sleeping
// on the host's doorbell (client_drain.go). Every completion that may
// change a handle's state or brings a notification sends on
// ClientConfig.Wake.
//
// A completion ring that breaks the protocol fences the transport: the
// client calls ClientConfig.Kill, stops, and every pending and later call
// returns ClientConfig.Shutdown's error naming the violation. Once the
// process is gone, every call returns ClientConfig.Shutdown's error.
type Client struct {
	// name says which transport, in every error the rings make up.
	name string
	// timeout bounds every call, with the caller's own deadline.
	timeout time.Duration
	// waitSpin is waitSpin (a test's own otherwise).
	waitSpin time.Duration
	// done ends once the process is gone.
	done context.Context
	// shutdown is the error of a call made once the process is gone;
	// fence, when not nil, is the violation the rings fenced it for.
	shutdown func(method string, fence error) error
	log      Logger
	kill     func() error
	wake     chan<- struct{}
	mem      []byte
	m        *mapping
	events   bool // the plugin forwards the transport's events
	// releaseTerminal: the plugin releases each handle it follows when it
	// reports it terminal, and says so with the state (doc.go: release at
	// terminal).
	releaseTerminal bool
	// prompt: the transport is a Waker, so the plugin forwards its events
	// and notifications as soon as it has them; Events and Notifications
	// then answer from what the rings brought without a drain call.
	prompt bool
	half   int // a submission larger than this goes over gRPC

	subMu    sync.Mutex
	sub      *producer
	scratch  wire
	nextCall uint64

	mu       sync.Mutex
	unmapped bool
	comp     *consumer
	calls    []*pendingCall // outstanding, in submission order
	known    map[sdk.HandleID]known
	evq      []sdk.Event
	notes    []sdk.Notification
	broken   error

	stopped    chan struct{}
	stopOnce   sync.Once
	readerDone chan struct{}
	stopAfter  func() bool
	// spinning counts callers draining the completion ring themselves;
	// while there are any, the reader naps (nap), and the last one to
	// stop rouses it.
	spinning atomic.Int32
	// polled is when Poll was last called (clock); while Polls come
	// that often, their caller drains the ring and the reader naps.
	polled atomic.Int64
	// napping is set while the reader naps; rousec ends a nap
	// (capacity 1).
	napping atomic.Bool
	rousec  chan struct{}
	// cpuAt is when a Poll last looked whether it runs on the CPU the
	// plugin's pump last ran on (clock), cpuSame what it found.
	cpuAt   atomic.Int64
	cpuSame atomic.Bool
}

// known is what the completion ring said of a handle posted through it,
// or released with its terminal state (release at terminal).
type known struct {
	terminal bool
	released bool // the plugin released it; the host's Release is answered here
	st       sdk.HandleStatus
}

// pendingCall is one call waiting for its result.
type pendingCall struct {
	id    uint64
	kind  uint16 // the result kind expected
	n     int    // items submitted
	ids   []sdk.HandleID
	got   int
	total int
	err   error
	posts []sdk.PostResult
	errs  []error
	done  chan struct{}
	fin   atomic.Bool
	// spun: the caller drained the completion ring itself for a while
	// (submit).
	spun bool
}

// ClientConfig is what a Client needs of the process it talks to, and what
// the plugin answered when it attached the rings.
type ClientConfig struct {
	// Name says which transport, in every error the client makes up.
	Name string
	// Timeout bounds every call, with the caller's own deadline.
	Timeout time.Duration
	// Done ends once the process is gone; the client stops then.
	Done context.Context
	// Shutdown is the error of a call made once the process is gone: it
	// must match sdk.ErrPluginShutdown. fence, when not nil, is the ring
	// protocol violation for which the client fenced the process.
	Shutdown func(method string, fence error) error
	// Kill fences the transport (kills its process). The client calls it,
	// on a goroutine of its own, when the completion ring breaks the
	// protocol.
	Kill func() error
	// Wake receives a value, without blocking, whenever a completion may
	// change what the host sees: a state change, an event or a
	// notification.
	Wake chan<- struct{}
	// Log receives the fence, and a failure to fence.
	Log Logger
	// Events: the plugin forwards the transport's events through the rings.
	Events bool
	// Prompt: the transport is a Waker, so the plugin forwards its events
	// and notifications as soon as it has them; Events and Notifications
	// then answer from what the rings brought without asking the plugin.
	Prompt bool
	// ReleaseTerminal: the plugin releases each handle it follows as soon
	// as it reports the handle terminal, and says so with the state
	// (release at terminal, doc.go).
	ReleaseTerminal bool
}

// NewClient serves the host's side of mem, mapped from a ring file of
// layout l: it starts the reader, which runs until cfg.Done ends, the
// protocol breaks, or Stop or Detach.
func NewClient(mem []byte, l Layout, cfg ClientConfig) *Client {
	m := newMapping(mem, l)
	r := &Client{
		name: cfg.Name, timeout: cfg.Timeout, waitSpin: waitSpin, done: cfg.Done, shutdown: cfg.Shutdown,
		log: cfg.Log, kill: cfg.Kill, wake: cfg.Wake, mem: mem, m: m,
		events: cfg.Events, prompt: cfg.Prompt, releaseTerminal: cfg.ReleaseTerminal,
		half:       int(l.subArena / 2),
		sub:        newProducer(m.sub, "submission"),
		comp:       newConsumer(m.comp, "completion"),
		known:      map[sdk.HandleID]known{},
		stopped:    make(chan struct{}),
		readerDone: make(chan struct{}),
		rousec:     make(chan struct{}, 1),
	}
	r.stopAfter = context.AfterFunc(cfg.Done, r.halt)
	go r.reader()
	return r
}

// halt ends the rings: the reader exits and unmaps them.
func (r *Client) halt() {
	r.stopOnce.Do(func() {
		close(r.stopped)
		r.mu.Lock()
		if !r.unmapped {
			r.m.host.force()
		}
		r.mu.Unlock()
	})
}

// isStopped reports whether the rings were stopped.
func (r *Client) isStopped() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// Stop stops the rings and waits for their reader, which unmaps them; the
// host calls it once the process is gone (or killed). A call pending
// under it ends with ClientConfig.Shutdown's error once Done ends, or at
// its deadline.
func (r *Client) Stop() {
	r.halt()
	<-r.readerDone
	r.stopAfter()
}

// Detach tells the plugin to stop serving and stops the rings (Close).
func (r *Client) Detach() {
	r.subMu.Lock()
	if ent, _, _, err := r.sub.reserve(0); err == nil {
		e := entry{seq: r.sub.tail, kind: kindDetach}
		e.encode(ent)
		r.sub.publish()
		r.m.plugin.ring()
	}
	r.subMu.Unlock()
	r.Stop()
}

// ReleasesAtTerminal reports whether the plugin releases each handle it
// reports terminal, and says so with the state (release at terminal).
func (r *Client) ReleasesAtTerminal() bool { return r.releaseTerminal }

// ForwardsEvents reports whether the plugin forwards the transport's
// events through the rings (the transport is an EventSource and claims it).
func (r *Client) ForwardsEvents() bool { return r.events }

// fence kills the transport after a protocol violation (r.mu held).
func (r *Client) fence(err error) {
	if r.broken != nil {
		return
	}
	r.broken = err
	r.log.Error("rings: the transport broke the ring protocol; fencing it (killing the process)", "transport", r.name, "error", err)
	go func() {
		if kerr := r.kill(); kerr != nil {
			r.log.Error("rings: fence failed", "transport", r.name, "error", kerr)
		}
	}()
	go r.halt()
}

// fenced returns the error a call sees once the rings fenced the
// transport: it waits (bounded) for the process to be gone.
func (r *Client) fenced(method string) error {
	r.mu.Lock()
	broken := r.broken
	r.mu.Unlock()
	if broken == nil {
		return nil
	}
	select {
	case <-r.done.Done():
	case <-time.After(fenceWait):
	}
	return r.shutdown(method, broken)
}

// gone is the error of any call once the rings fenced the transport or the
// process is gone; nil while it lives.
func (r *Client) gone(method string) error {
	if err := r.fenced(method); err != nil {
		return err
	}
	if r.done.Err() != nil {
		return r.shutdown(method, nil)
	}
	return nil
}

// lost is the error of a call whose rings stopped under it: the process
// exited or was fenced.
func (r *Client) lost(ctx context.Context, method string) error {
	if err := r.fenced(method); err != nil {
		return err
	}
	select {
	case <-r.done.Done():
		return r.shutdown(method, nil)
	case <-ctx.Done():
		return r.timeoutError(method)
	}
}

func (r *Client) timeoutError(method string) error {
	return sdk.Errorf(sdk.CodeTimeout, "%s: %s did not answer through its rings before the call's deadline (at most %s) or the caller canceled it; whether the call took effect is unknown: poll or count resources to find out",
		method, r.name, r.timeout)
}

// callErr is what a caller sees of a transport's call-level error, as over
// gRPC (callError): a live transport claiming PLUGIN_SHUTDOWN is a backend
// failure.
func (r *Client) callErr(method string, err error) error {
	if sdk.CodeOf(err) == sdk.CodePluginShutdown {
		if r.done.Err() != nil {
			return r.shutdown(method, nil)
		}
		return sdk.Errorf(sdk.CodeBackend, "%s: %s is alive but answered %v; treating it as a backend failure", method, r.name, err)
	}
	return err
}

// countError is the error of a call answered with another number of items
// than it submitted: its answer cannot be matched to them.
func (c *pendingCall) countError(name string) error {
	method := "Post"
	switch c.kind {
	case kindReleaseRes:
		method = "Release"
	case kindSendNotesRes:
		method = "SendNotifications"
	}
	return sdk.Errorf(sdk.CodeBackend, "%s: %s answered %d items for %d; contract violation, results dropped", method, name, c.total, c.n)
}

// Scribble breaks the completion ring as a transport that scribbles over
// the mapping would (its tail jumps far ahead) and rings this side's
// doorbell, so that a test across real processes can prove the fence. It
// reports false once the mapping is gone. Only tests call it.
func (r *Client) Scribble() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped {
		return false
	}
	r.m.comp.tail.Add(1 << 20)
	r.m.host.force()
	return true
}
