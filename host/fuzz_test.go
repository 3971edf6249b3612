package host

import (
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// The fuzz targets below run their seed corpora (testdata/fuzz/...) as plain
// tests; `go test -fuzz FuzzX ./host` explores further. Each one states
// independently of the code under test what an accepted input must
// satisfy, so a check that lets a bad value through fails here.

// nameOK is the rule for names and ids from outside, restated: at most
// MaxNameBytes bytes, no NUL.
func nameOK(s string) bool { return len(s) <= 256 && !strings.ContainsRune(s, 0) }

// geometryOK restates checkPoolGeometry: a block size of 1 to 2^32 bytes, 1
// to 2^32-1 blocks, and offset + block size x blocks within a file.
func geometryOK(offset, blockSize, blocks uint64) bool {
	if blockSize < 1 || blockSize > 1<<32 || blocks < 1 || blocks > math.MaxUint32 {
		return false
	}
	end := new(big.Int).Mul(new(big.Int).SetUint64(blockSize), new(big.Int).SetUint64(blocks))
	end.Add(end, new(big.Int).SetUint64(offset))
	return end.Cmp(big.NewInt(math.MaxInt64)) <= 0
}

// FuzzParseConfig: no YAML makes ParseConfig panic, and a configuration it
// accepts has every field in range and validates again unchanged.
func FuzzParseConfig(f *testing.F) {
	dir := f.TempDir()
	f.Add([]byte("name: a\ntransport: {name: fake}\nengine: {socket: " + dir + "/e.sock}\nstate_dir: " + dir + "\n"))
	f.Add([]byte("name: a\ntransport: {name: ucx, call_timeout: 5s, params: {tls: tcp}}\nengine: {socket: " + dir + "/e.sock}\nstate_dir: " + dir +
		"\npools: [{name: kv, path: /x, block_size: 4096, blocks: 16}]\npeers: [{name: b, address: '127.0.0.1:1'}]\nescalation: {cap: 1s, policy: release-and-reuse}\nlog_level: debug\n"))
	f.Add([]byte("name: a\ntransport: {name: fake}\nengine: {socket: " + dir + "/e.sock}\nstate_dir: " + dir + "\npools: [{name: kv, path: /x, block_size: 4294967296, blocks: 4294967295}]\n"))
	f.Add([]byte("name: a\ntransport: {name: fake, call_timeout: -1s}\nescalation: {cap: 25h}\n"))
	f.Add([]byte("name: ../a\ntransport: {sha256: zz}\nunknown: 1\n"))
	f.Add([]byte("name: " + strings.Repeat("n", 257) + "\ntransport: {name: fake}\nengine: {socket: " + dir + "/e.sock}\nstate_dir: " + dir + "\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw)
		if err != nil {
			if c != nil {
				t.Fatalf("ParseConfig returned a config with the error %v", err)
			}
			return
		}
		if c.Name == "" || !nameOK(c.Name) || strings.Contains(c.Name, "/") || c.Name == "." || c.Name == ".." {
			t.Fatalf("accepted host name %q", c.Name)
		}
		if c.Transport.CallTimeout <= 0 || c.Transport.CallTimeout > MaxCallTimeout {
			t.Fatalf("accepted call_timeout %v", c.Transport.CallTimeout)
		}
		if c.Escalation.Cap <= 0 || c.Escalation.Cap > MaxCap {
			t.Fatalf("accepted escalation cap %v", c.Escalation.Cap)
		}
		if c.Escalation.Policy != PolicyFence && c.Escalation.Policy != PolicyReleaseAndReuse {
			t.Fatalf("accepted policy %q", c.Escalation.Policy)
		}
		pools := map[string]bool{}
		for _, p := range c.Pools {
			if p.Name == "" || !nameOK(p.Name) || pools[p.Name] || p.Path == "" || !geometryOK(0, p.BlockSize, p.Blocks) {
				t.Fatalf("accepted pool %+v", p)
			}
			pools[p.Name] = true
		}
		peers := map[string]bool{c.Name: true}
		for _, p := range c.Peers {
			if p.Name == "" || !nameOK(p.Name) || peers[p.Name] || p.Address == "" || !nameOK(p.Address) {
				t.Fatalf("accepted peer %+v", p)
			}
			peers[p.Name] = true
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted config fails validation again: %v", err)
		}
	})
}

// FuzzDecodePeerInfo: no body a peer's metadata endpoint serves makes
// decodePeerInfo panic, and what it accepts has its names and every pool's
// geometry in range, within the pool limit.
func FuzzDecodePeerInfo(f *testing.F) {
	good := PeerInfo{Name: "prefill", Agent: "prefill-1", Transport: "fake", ContractMajor: 1, Epoch: 3, Metadata: []byte("md"),
		Pools: []PoolLayout{{Name: "kv", BlockSize: 65536, Blocks: 128, Region: 1}}}
	good.Compat = CompatHash(good.Transport, good.ContractMajor, good.Pools)
	raw, err := json.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"name":"a","compat":"c","pools":[{"name":"kv","block_size":4294967296,"blocks":4294967295}]}`))
	f.Add([]byte(`{"name":"a","compat":"c","pools":[{"name":"kv","block_size":0,"blocks":1}]}`))
	f.Add([]byte(`{"name":"a\u0000b","compat":"c"}`))
	f.Add([]byte(`{"name":"` + strings.Repeat("n", 257) + `","compat":"c"}`))
	f.Add([]byte(`{"name":"a","compat":"c","metadata":"not base64"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pi, err := decodePeerInfo(body)
		if err != nil {
			return
		}
		if pi.Name == "" || pi.Compat == "" {
			t.Fatalf("accepted peer info without name or compat: %+v", pi)
		}
		for _, s := range []string{pi.Name, pi.Agent, pi.Transport, pi.Compat} {
			if !nameOK(s) {
				t.Fatalf("accepted a name of %d bytes or with a NUL", len(s))
			}
		}
		if len(pi.Pools) > maxPeerPools {
			t.Fatalf("accepted %d pools", len(pi.Pools))
		}
		for _, p := range pi.Pools {
			if !nameOK(p.Name) || !geometryOK(0, p.BlockSize, p.Blocks) {
				t.Fatalf("accepted pool %+v", p)
			}
		}
	})
}

// engineRequests are the engine requests validateRequest checks, in the
// order FuzzValidateRequest's kind byte picks them.
func engineRequests() []proto.Message {
	return []proto.Message{
		&enginev1.RegisterPoolRequest{}, &enginev1.ConnectPeerRequest{}, &enginev1.RemovePeerRequest{},
		&enginev1.ReadRequest{}, &enginev1.WriteRequest{}, &enginev1.ExpectSendRequest{},
		&enginev1.ExpectReceiveRequest{}, &enginev1.AllocRequest{}, &enginev1.FreeRequest{},
	}
}

// pushOK restates checkPush: 1 to MaxConsumers notifications and a lease
// of 1 ms to MaxLease.
func pushOK(count uint32, leaseMs uint64) bool {
	return count >= 1 && count <= MaxConsumers && leaseMs >= 1 && leaseMs <= uint64(24*time.Hour/time.Millisecond)
}

// FuzzValidateRequest: no engine request, whatever its wire bytes, makes
// validateRequest panic, and one it accepts has every name and number in
// range, so the handlers may narrow and add them without overflow.
func FuzzValidateRequest(f *testing.F) {
	seeds := []proto.Message{
		&enginev1.RegisterPoolRequest{Name: "kv", Path: "/dev/shm/kv", Offset: 4096, BlockSize: 65536, Blocks: 64},
		&enginev1.RegisterPoolRequest{Name: "kv", BlockSize: 1 << 32, Blocks: math.MaxUint32, Offset: math.MaxInt64},
		&enginev1.ConnectPeerRequest{Name: "prefill", Ranks: []*enginev1.RemoteRank{{Address: "127.0.0.1:7000", Pool: "kv"}}},
		&enginev1.RemovePeerRequest{Name: "prefill"},
		&enginev1.ReadRequest{RequestId: "r1", Peer: "prefill", Parts: []*enginev1.Part{{Pool: 1, Local: []uint32{1}, Remote: []uint32{2}}}, Token: 7},
		&enginev1.WriteRequest{RequestId: "w1", Peer: "decode", Consumers: 1, LeaseMs: 2000, Token: 9},
		&enginev1.ExpectSendRequest{RequestId: "s1", Pool: 1, Blocks: []uint32{3}, Consumers: 65536, LeaseMs: 86400000},
		&enginev1.ExpectReceiveRequest{RequestId: "v1", Peer: "prefill", Pool: 1, Blocks: []uint32{4}, Producers: 0, LeaseMs: 86400001},
		&enginev1.AllocRequest{Pool: 1},
		&enginev1.FreeRequest{Pool: 1},
		// Names at and just over the limit, which random mutation rarely
		// grows to.
		&enginev1.RemovePeerRequest{Name: strings.Repeat("p", 257)},
		&enginev1.ReadRequest{RequestId: strings.Repeat("r", 256), Peer: strings.Repeat("q", 257)},
		&enginev1.ConnectPeerRequest{Name: "p", Ranks: []*enginev1.RemoteRank{{Address: strings.Repeat("a", 257), Pool: "kv"}}},
	}
	for _, m := range seeds {
		raw, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for k, e := range engineRequests() {
			if e.ProtoReflect().Descriptor() == m.ProtoReflect().Descriptor() {
				f.Add(uint8(k), raw)
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		reqs := engineRequests()
		m := reqs[int(kind)%len(reqs)]
		if proto.Unmarshal(raw, m) != nil {
			return
		}
		if err := validateRequest(m); err != nil {
			if len(err.Error()) > 4096 {
				t.Fatalf("an error of %d bytes: names are refused without being repeated whole", len(err.Error()))
			}
			return
		}
		bad := func(what string) { t.Fatalf("accepted %s: %v", what, m) }
		switch r := m.(type) {
		case *enginev1.RegisterPoolRequest:
			if !nameOK(r.GetName()) || !geometryOK(r.GetOffset(), r.GetBlockSize(), uint64(r.GetBlocks())) {
				bad("a pool out of range")
			}
		case *enginev1.ConnectPeerRequest:
			if !nameOK(r.GetName()) {
				bad("a peer name")
			}
			for _, rk := range r.GetRanks() {
				if !nameOK(rk.GetAddress()) || !nameOK(rk.GetPool()) {
					bad("a rank's address or pool")
				}
			}
		case *enginev1.RemovePeerRequest:
			if !nameOK(r.GetName()) {
				bad("a peer name")
			}
		case *enginev1.ReadRequest:
			if !nameOK(r.GetRequestId()) || !nameOK(r.GetPeer()) {
				bad("a request id or peer")
			}
		case *enginev1.WriteRequest:
			if !nameOK(r.GetRequestId()) || !nameOK(r.GetPeer()) || !pushOK(r.GetConsumers(), r.GetLeaseMs()) {
				bad("a write out of range")
			}
		case *enginev1.ExpectSendRequest:
			if !nameOK(r.GetRequestId()) || !nameOK(r.GetPeer()) || !pushOK(r.GetConsumers(), r.GetLeaseMs()) {
				bad("a send out of range")
			}
		case *enginev1.ExpectReceiveRequest:
			if !nameOK(r.GetRequestId()) || !nameOK(r.GetPeer()) || !pushOK(r.GetProducers(), r.GetLeaseMs()) {
				bad("a receive out of range")
			}
		}
		if lease, ok := m.(interface{ GetLeaseMs() uint64 }); ok {
			d, err := LeaseFromMillis(lease.GetLeaseMs())
			if err != nil || d <= 0 || d > MaxLease {
				bad("a lease that converts badly")
			}
		}
	})
}

// FuzzOutboxAck: whatever incarnation and cursor an engine sends, the
// report log acknowledges only a cursor of this host process's that it
// issued (or 0 from an engine with no incarnation yet), and a refused one
// changes nothing.
func FuzzOutboxAck(f *testing.F) {
	f.Add(uint64(0), uint64(0), true)
	f.Add(uint64(0), uint64(2), false)
	f.Add(uint64(1), uint64(1), false)
	f.Add(uint64(0), uint64(3), true)
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), false)
	f.Fuzz(func(t *testing.T, inc, cursor uint64, mine bool) {
		var o outbox
		o.add(recvRound("a", "b", "c"))
		if mine {
			inc = o.incarnation()
		}
		err := o.ack(inc, cursor)
		ok := (inc == o.incarnation() && cursor <= 3) || (inc == 0 && cursor == 0)
		if (err == nil) != ok {
			t.Fatalf("ack(%#x, %d) on incarnation %#x: %v", inc, cursor, o.incarnation(), err)
		}
		want := uint64(0)
		if err == nil {
			want = cursor
		}
		if o.base != want {
			t.Fatalf("ack(%#x, %d): everything below %d is acknowledged, want %d", inc, cursor, o.base, want)
		}
		if b, ok, _ := o.next(0, DefaultBatchBytes); ok && (b.Incarnation != o.incarnation() || b.Incarnation == 0) {
			t.Fatalf("a batch of incarnation %#x on a host of %#x", b.Incarnation, o.incarnation())
		}
	})
}
