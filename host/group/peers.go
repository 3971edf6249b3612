package group

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// maxPeerRecord bounds a peer record read from etcd.
const maxPeerRecord = 4096

// PeerAddress is how a host is found by name: its metadata endpoint and its
// compatibility hash (host.CompatHash), so a peer can be refused before any
// connection.
type PeerAddress struct {
	Name         string `json:"name"`
	MetadataAddr string `json:"metadata_addr"`
	Compat       string `json:"compat"`
	// Host is the name the host's certificate and metadata carry, where
	// the record is published under another name (EngineRankName); empty
	// when it is Name.
	Host string `json:"host,omitempty"`
}

func (p PeerAddress) validate() error {
	switch {
	case p.Name == "" || len(p.Name) > ledger.MaxNameLen:
		return fmt.Errorf("peer name %.40q: want 1-%d bytes: %w", p.Name, ledger.MaxNameLen, ErrBadArgument)
	case !validHostPort(p.MetadataAddr):
		return fmt.Errorf("peer %q: metadata address %.80q: want host:port: %w", p.Name, p.MetadataAddr, ErrBadArgument)
	case len(p.Host) > ledger.MaxNameLen:
		return fmt.Errorf("peer %q: host name of %d bytes: want at most %d: %w", p.Name, len(p.Host), ledger.MaxNameLen, ErrBadArgument)
	case !validCompat(p.Compat):
		return fmt.Errorf("peer %q: compatibility hash %.80q: want 64 hex digits: %w", p.Name, p.Compat, ErrBadArgument)
	}
	return nil
}

func validHostPort(s string) bool {
	h, p, err := net.SplitHostPort(s)
	return err == nil && h != "" && p != "" && len(s) <= 256
}

func validCompat(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}

// Publish makes this host findable by name, under its lease: the entry goes
// when the host does. A name another live host published is refused
// (ErrPeerNameTaken); republishing our own updates it.
func (g *Group) Publish(ctx context.Context, p PeerAddress) error {
	if err := p.validate(); err != nil {
		return err
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	if g.cfg.Solo() {
		g.mu.Lock()
		g.peers[p.Name] = p
		g.mu.Unlock()
		return nil
	}
	raw, _ := json.Marshal(p)
	key := ledger.PeerKey(p.Name)
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	resp, err := g.cli.Txn(octx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", g.lease)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(g.lease))).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(key, string(raw), clientv3.WithLease(g.lease))},
			[]clientv3.Op{clientv3.OpGet(key)},
		)).Commit()
	if err != nil {
		return g.wrap(fmt.Sprintf("publishing peer %q", p.Name), err)
	}
	if resp.Succeeded {
		return nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return nil
	}
	holder := "another host"
	if kvs := inner.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		holder = fmt.Sprintf("the host holding lease %x", kvs[0].Lease)
	}
	return fmt.Errorf("peer name %q is published by %s: %w; give each host a unique name", p.Name, holder, ErrPeerNameTaken)
}

// Lookup finds a published peer by name. A record that fails validation is
// an error (ErrMalformed), never an address to dial.
func (g *Group) Lookup(ctx context.Context, name string) (PeerAddress, error) {
	if name == "" || len(name) > ledger.MaxNameLen {
		return PeerAddress{}, fmt.Errorf("peer name %.40q: want 1-%d bytes: %w", name, ledger.MaxNameLen, ErrBadArgument)
	}
	if err := g.checkOpen(); err != nil {
		return PeerAddress{}, err
	}
	if g.cfg.Solo() {
		g.mu.Lock()
		p, ok := g.peers[name]
		g.mu.Unlock()
		if !ok {
			return PeerAddress{}, fmt.Errorf("peer %q: %w: a group of size 1 has no coordinator, so only this host is known; configure the peer's address statically", name, ErrPeerNotFound)
		}
		return p, nil
	}
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	resp, err := g.cli.Get(octx, ledger.PeerKey(name))
	if err != nil {
		return PeerAddress{}, g.wrap(fmt.Sprintf("looking up peer %q", name), err)
	}
	if len(resp.Kvs) == 0 {
		return PeerAddress{}, fmt.Errorf("peer %q: %w: it is not running, or has not published yet; retry, or check its name", name, ErrPeerNotFound)
	}
	raw := resp.Kvs[0].Value
	if len(raw) > maxPeerRecord {
		return PeerAddress{}, fmt.Errorf("peer %q: record of %d bytes, over the %d limit: %w", name, len(raw), maxPeerRecord, ErrMalformed)
	}
	var p PeerAddress
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return PeerAddress{}, fmt.Errorf("peer %q: record does not decode: %v: %w", name, err, ErrMalformed)
	}
	if err := p.validate(); err != nil || p.Name != name {
		return PeerAddress{}, fmt.Errorf("peer %q: record names %q or fails validation (%v): %w", name, p.Name, err, ErrMalformed)
	}
	return p, nil
}
