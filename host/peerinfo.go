package host

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// PeerInfo is what a host publishes to its peers: who it is, its transport's
// metadata for this epoch, and the layout of its pools. A peer refuses it
// before any transfer when the compatibility hashes differ.
type PeerInfo struct {
	Name          string       `json:"name"`
	Agent         string       `json:"agent"`
	Transport     string       `json:"transport"`
	ContractMajor uint32       `json:"contract_major"`
	Epoch         uint64       `json:"epoch"`
	Metadata      []byte       `json:"metadata"`
	Pools         []PoolLayout `json:"pools"`
	Compat        string       `json:"compat"`
}

// PoolLayout is one pool as a peer sees it: its block geometry and the
// region id its host's transport gave it this epoch.
type PoolLayout struct {
	Name      string `json:"name"`
	BlockSize uint64 `json:"block_size"`
	Blocks    uint64 `json:"blocks"`
	Region    uint64 `json:"region"`
}

// CompatHash is the compatibility hash of a host: the transport, the
// contract major version and every pool's block size. Two hosts move blocks
// only when theirs are equal.
func CompatHash(transport string, contractMajor uint32, pools []PoolLayout) string {
	sizes := make([]string, len(pools))
	for i, p := range pools {
		sizes[i] = fmt.Sprintf("%s=%d", p.Name, p.BlockSize)
	}
	sort.Strings(sizes)
	h := sha256.New()
	fmt.Fprintf(h, "custody-compat/1\x00%s\x00%d", transport, contractMajor)
	for _, s := range sizes {
		fmt.Fprintf(h, "\x00%s", s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CheckCompat refuses a peer whose hash differs from ours, naming both.
func (p PeerInfo) CheckCompat(ours string) error {
	if p.Compat != ours {
		return fmt.Errorf("peer %q is incompatible: its compatibility hash %.12s (transport %s, contract v%d) differs from ours %.12s; check that both hosts run the same transport and block sizes",
			p.Name, p.Compat, p.Transport, p.ContractMajor, ours)
	}
	return nil
}

// maxPeerPools bounds how many pools a peer may publish.
const maxPeerPools = 1024

// validate checks what a peer sent before anything uses it: names present,
// and every number in range before it is narrowed.
func (p PeerInfo) validate() error {
	if p.Name == "" || p.Compat == "" {
		return fmt.Errorf("name and compat are required")
	}
	if err := checkNames("peer info", "name", p.Name, "agent", p.Agent, "transport", p.Transport, "compat", p.Compat); err != nil {
		return err
	}
	if len(p.Pools) > maxPeerPools {
		return fmt.Errorf("%d pools exceed the limit of %d", len(p.Pools), maxPeerPools)
	}
	for i, pl := range p.Pools {
		if err := checkNames("peer info", fmt.Sprintf("pools[%d].name", i), pl.Name); err != nil {
			return err
		}
		if err := checkPoolGeometry(fmt.Sprintf("pool %.64q", pl.Name), fmt.Sprintf("pools[%d].", i), 0, pl.BlockSize, pl.Blocks); err != nil {
			return err
		}
	}
	return nil
}

// decodePeerInfo decodes and validates the body a peer's metadata
// endpoint served: nothing of it is used before it passed validate.
func decodePeerInfo(body []byte) (PeerInfo, error) {
	var pi PeerInfo
	if err := json.Unmarshal(body, &pi); err != nil {
		return PeerInfo{}, err
	}
	if err := pi.validate(); err != nil {
		return PeerInfo{}, err
	}
	return pi, nil
}
