package group

// LostRanks lists every rank loss seen since Open, oldest first.
func (g *Group) LostRanks() []LostRank {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.LostRanks()
}

// Live reports, per rank, whether its membership key is present now.
func (g *Group) Live() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	live := g.l.Live()
	if g.cfg.Solo() {
		live[0] = !g.closed
	}
	return live
}

// members snapshots the member id of each rank ("" where absent).
func (g *Group) members() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.Members()
}
