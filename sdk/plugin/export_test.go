package plugin

// CorruptCompletions scribbles over p's completion ring as a broken
// transport would (its tail jumps far ahead) and rings the host. It
// reports false when p has no rings.
func CorruptCompletions(p *Plugin) bool {
	r := p.rings.Load()
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped {
		return false
	}
	r.m.comp.tail.Add(1 << 20)
	r.m.host.force()
	return true
}

// RingsEnv is the environment variable that turns a plugin's rings off.
const RingsEnv = ringsEnv
