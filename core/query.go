package core

// Connected reports whether peer name is connected (published) in the
// attached epoch, so a runtime knows when a request for it needs a handshake
// first.
func (c *Core) Connected(name string) bool {
	p := c.peers[name]
	return p != nil && !p.retired
}
