package sdk

// RegionID names memory registered with RegisterMemory. It is also how a
// peer names that memory in its remote descriptors, once it has loaded this
// agent's metadata.
type RegionID uint64

// PeerID names a peer loaded with LoadPeers.
type PeerID uint64

// DlistID names a descriptor list prepared with PrepareDescriptors.
type DlistID uint64

// HandleID names one posted transfer.
type HandleID uint64

// Every id a transport hands out is unique within one transport process:
// a transport never returns an id it returned before, even after the resource
// it named was released. Zero is never a valid id; it means "none" (for
// example the local side of a descriptor list has no PeerID).
