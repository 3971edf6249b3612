package cluster

import "time"

// groupJoin is how long a rank waits for the others of its group at start.
const groupJoin = "20s"

// Etcd is a real etcd embedded in rank 0 of one engine's hosts, which the
// ranks of every engine agree through: the group sections that Group
// writes embed it in that engine's ranks and dial it from the others.
type Etcd struct {
	// Engine is the engine whose rank 0 runs the etcd.
	Engine string
	// Addr is its client address; Dir its data directory.
	Addr, Dir string
}

// NewEtcd picks a free loopback port for an etcd that engine's rank 0 will
// run with its data in dir.
func NewEtcd(engine, dir string) (Etcd, error) {
	addr, err := freePort()
	if err != nil {
		return Etcd{}, err
	}
	return Etcd{Engine: engine, Addr: addr, Dir: dir}, nil
}

// Group is the group section of rank of engine, in a group of size ranks
// whose members hold leases of leaseTTL.
func (e Etcd) Group(engine string, rank, size int, leaseTTL time.Duration) map[string]any {
	coord := map[string]any{"endpoints": []string{e.Addr}}
	if engine == e.Engine && rank == 0 {
		coord = map[string]any{"embedded": map[string]any{"dir": e.Dir, "listen": e.Addr}}
	} else if engine == e.Engine {
		coord = map[string]any{"embedded": map[string]any{"listen": e.Addr}}
	}
	return map[string]any{"engine": engine, "rank": rank, "size": size, "coordinator": coord,
		"timeouts": map[string]any{"lease_ttl": leaseTTL.String(), "join": groupJoin}}
}
