package api

// The sold-out gate at the edge (deploy/gate, the nginx in front of the
// replicas) and the service speak through these names.
const (
	// HeaderSoldOut is set by the service on a 409 sold_out that its
	// sold-out flag answered: it carries the product id, and the gate learns
	// from it to answer the product's next purchases itself, for a while.
	HeaderSoldOut = "X-Seckill-Sold-Out"
	// HeaderGate is set by the gate on the answers it gives itself.
	HeaderGate = "X-Seckill-Gate"
	// HeaderGateSecret carries the shared secret of the gate's control
	// endpoint (GATE_SECRET).
	HeaderGateSecret = "X-Gate-Secret"
	// GateStockBackPath is the gate's control endpoint a process POSTs to,
	// with ?products=1,2,3, when those products have stock again: the gate
	// forgets they were sold out.
	GateStockBackPath = "/gate/stock-back"
	// GateStatePath answers the gate's sold-out set and how many purchases
	// it refused (GateState).
	GateStatePath = "/gate/state"
)

// GateState is the answer of GET GateStatePath.
type GateState struct {
	SoldOut  []int64 `json:"sold_out"`
	Answered int64   `json:"answered"`
}
