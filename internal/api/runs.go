package api

import "time"

// RunSpec is the body of POST /api/runs. A zero field takes its default.
type RunSpec struct {
	// Lock is the lock strategy's name. Default: DefaultLock.
	Lock string `json:"lock"`
	// Mode is one of Modes. Default: DefaultMode.
	Mode string `json:"mode"`
	// Shards is the number of stock keys, 1–MaxShards. Default: DefaultShards.
	Shards int `json:"shards"`
	// Stock is the initial stock, 1–MaxRunStock. Default: 100.
	Stock int `json:"stock"`
	// Buyers is the number of distinct users, 1–MaxRunBuyers. Default: 1000.
	Buyers int `json:"buyers"`
	// Requests is the number of order requests, 1–MaxRunRequests; beyond
	// Buyers, users repeat and are told "already bought". Default: Buyers.
	Requests int `json:"requests"`
	// Concurrency is the number of requests in flight,
	// 1–MaxRunConcurrency. Default: 64.
	Concurrency int `json:"concurrency"`
	// HoldMS is a pause inside the critical section, 0–MaxRunHoldMS. It
	// widens the race window so that a flawed lock shows its flaw on every
	// run.
	HoldMS int `json:"hold_ms"`
	// Fault is one of Faults. Default: FaultNone.
	Fault string `json:"fault"`
	// FaultRequests applies the fault to the first this many requests only,
	// so that the rest show whether the lock recovers. Default: 0, every
	// request.
	FaultRequests int `json:"fault_requests,omitempty"`
	// Seat names the browser that starts the run, in a class sharing one
	// lab: GET /api/runs?seat= lists that seat's runs. The page makes one
	// and keeps it; it is a label, not a credential (runs are anyone's to
	// read). At most MaxSeatLen letters, digits and dashes.
	Seat string `json:"seat,omitempty"`
	// Student is the name the teacher sees beside the seat's runs and
	// answers; at most MaxStudentLen characters. Seat and Student are read
	// back only by the operator and by the seat itself (Run.Unnamed).
	Student string `json:"student,omitempty"`
}

// Bounds of a seat and a student's name.
const (
	MaxSeatLen    = 64
	MaxStudentLen = 40
)

// Bounds of a RunSpec: one run must not take the machine from the service.
const (
	MaxRunStock       = 10_000
	MaxRunBuyers      = 20_000
	MaxRunRequests    = 20_000
	MaxRunConcurrency = 256
	MaxRunHoldMS      = 2_000
)

// Defaults of a RunSpec beside DefaultLock, DefaultMode and DefaultShards.
const (
	DefaultRunStock       = 100
	DefaultRunBuyers      = 1000
	DefaultRunConcurrency = 64
)

// Faults a run injects, by the lock ladder.
const (
	FaultNone = "none"
	// FaultAbandon: the holder never releases.
	FaultAbandon = "abandon"
	// FaultCrashBeforeExpire: setnx-expire's holder dies between SETNX and
	// EXPIRE.
	FaultCrashBeforeExpire = "crash-before-expire"
	// FaultClockSkew: the holder's clock runs past any lock TTL.
	FaultClockSkew = "clock-skew"
	// FaultReleaseBeforeCommit: the sqlrmw mode's holder releases its lock
	// before COMMIT.
	FaultReleaseBeforeCommit = "release_before_commit"
	// FaultCrashAfterTake: the purchase stops between its take and its
	// order (the mq mode: its publish), as a process that died there would.
	FaultCrashAfterTake = "crash-after-take"
	// FaultPoison: the async mode's order is queued with a row the
	// database refuses; it goes to the dead letters (MySQL only).
	FaultPoison = "poison"
)

// Faults lists the faults a run accepts, FaultNone first.
func Faults() []string {
	return []string{FaultNone, FaultAbandon, FaultCrashBeforeExpire, FaultClockSkew, FaultReleaseBeforeCommit, FaultCrashAfterTake, FaultPoison}
}

// WithDefaults returns s with its zero fields set to their defaults.
func (s RunSpec) WithDefaults() RunSpec {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if s.Lock == "" {
		s.Lock = DefaultLock
	}
	if s.Mode == "" {
		s.Mode = DefaultMode
	}
	if s.Fault == "" {
		s.Fault = FaultNone
	}
	def(&s.Shards, DefaultShards)
	def(&s.Stock, DefaultRunStock)
	def(&s.Buyers, DefaultRunBuyers)
	def(&s.Requests, s.Buyers)
	def(&s.Concurrency, DefaultRunConcurrency)
	return s
}

// Statuses of a Run.
const (
	// RunQueued: waiting behind the run going, at Run.Place.
	RunQueued  = "queued"
	RunRunning = "running"
	RunDone    = "done"
	RunFailed  = "failed"
)

// Run is a lab run, the answer of POST /api/runs and GET /api/runs/:id.
type Run struct {
	// ID is a decimal string.
	ID     string `json:"id"`
	Status string `json:"status"`
	// Place is a queued run's place in the queue, 1 for the next to run;
	// absent once it runs.
	Place    int         `json:"place,omitempty"`
	Progress RunProgress `json:"progress"`
	Spec     RunSpec     `json:"spec"` // with its defaults applied
	Product  int64       `json:"product_id"`
	// Result is absent until the run has sent its load.
	Result *RunResult `json:"result,omitempty"`
	Error  string     `json:"error,omitempty"`
	// Queued is when the run was asked for; Started when it began to run,
	// absent while it waits in the queue.
	Queued   time.Time  `json:"queued_at"`
	Started  *time.Time `json:"started_at,omitempty"`
	Finished *time.Time `json:"finished_at,omitempty"`
}

// Unnamed is r without the seat and the student that started it: what a
// caller without the operator's token reads of another seat's run, so that
// a class's names are not told to whoever reaches the service.
func (r Run) Unnamed() Run {
	r.Spec.Seat, r.Spec.Student = "", ""
	return r
}

// RunProgress counts the requests of a run.
type RunProgress struct {
	Done    int `json:"done"`
	Total   int `json:"total"`
	OK      int `json:"ok"`
	SoldOut int `json:"sold_out"`
	Errors  int `json:"errors"`
}

// RunResult is what one load run measured and judged: the harness computes
// it, a lab run carries it, the page charts it.
type RunResult struct {
	ProductID int64  `json:"product_id"`
	Strategy  string `json:"strategy"`
	Mode      string `json:"mode"`
	Instances int    `json:"instances"`
	Stock     int    `json:"stock"`
	Shards    int    `json:"shards,omitempty"` // 0: the service's default
	// Masters is the Redis masters the stock was on, when the run knew
	// (the cluster scenario: 1 for one Redis); 0 when not recorded.
	Masters int `json:"masters,omitempty"`
	// Fallback is the product's fallback setting; nil: the service's default.
	Fallback    *bool `json:"fallback,omitempty"`
	Concurrency int   `json:"concurrency"`
	HoldMS      int64 `json:"hold_ms,omitempty"`
	// The buyers were users UserBase+1 … UserBase+Buyers.
	Buyers   int   `json:"buyers"`
	UserBase int64 `json:"user_base"`
	// Fault is the fault the run injected (one of Faults), absent for none.
	Fault string `json:"fault,omitempty"`
	// Lifecycle is the product's, for a run with a payment window.
	Lifecycle string `json:"lifecycle,omitempty"`

	// Requests is the number of order requests that completed (answered or
	// failed); OK + SoldOut + AlreadyBought + Errors.
	Requests int `json:"requests"`
	// OK is the sales: 201 (written) and 202 (queued, the async mode).
	OK int `json:"ok"`
	// Accepted is the 202s among OK.
	Accepted      int `json:"accepted,omitempty"`
	SoldOut       int `json:"sold_out"`
	AlreadyBought int `json:"already_bought"`
	Errors        int `json:"errors"`

	// Sold is the orders in the service's audit.
	Sold int `json:"sold"`
	// DeadLettered is the orders answered 202 and refused by the database
	// since (the audit's count).
	DeadLettered int `json:"dead_lettered,omitempty"`
	// Missing202 is the orders answered 202 that never reached the table,
	// when the run checked them (the async-durability scenario).
	Missing202 int `json:"missing_202,omitempty"`
	// Twice202 is how many of those were an order id answered 202 to one
	// buyer after another already had it: a lost promise that is also
	// another's order (each extra copy counts in Missing202 too).
	Twice202    int `json:"twice_202,omitempty"`
	Oversold    int `json:"oversold"`
	LostUpdates int `json:"lost_updates"`
	// Undersold is the units left unsold while buyers were told "sold out".
	Undersold int `json:"undersold"`
	// SoldOutEarly is the "sold out" answers received before the request of
	// a later sale was sent: those buyers were refused while a unit was
	// still there (stock only goes down, unless a unit is given back after
	// an error or a lost update writes it back). An end-state audit cannot
	// see them; a closed loop with few workers can.
	SoldOutEarly int `json:"sold_out_early,omitempty"`

	RPS           float64 `json:"rps"`
	P50MS         float64 `json:"p50_ms"`
	P90MS         float64 `json:"p90_ms"`
	P99MS         float64 `json:"p99_ms"`
	MaxMS         float64 `json:"max_ms"`
	LockWaitP99MS float64 `json:"lock_wait_p99_ms"`
	ElapsedS      float64 `json:"elapsed_s"`
	// DrainS is how long the queue took to drain after the load (the async
	// mode); DrainP50MS and DrainP99MS are the percentiles of the time
	// from a purchase's 202 to its order's row.
	DrainS     float64 `json:"drain_s,omitempty"`
	DrainP50MS float64 `json:"drain_p50_ms,omitempty"`
	DrainP99MS float64 `json:"drain_p99_ms,omitempty"`

	// A run with a payment window pays each order around its window's end
	// (the pay-vs-timeout race): PaidOK is the payments answered 200,
	// PayRefused those answered 409 order_cancelled, and PaidAndReturned
	// the units both paid for and back on sale (the audit's lost updates,
	// and the payments answered 200 whose order ended cancelled).
	PaidOK          int `json:"paid_ok,omitempty"`
	PayRefused      int `json:"pay_refused,omitempty"`
	PaidAndReturned int `json:"paid_and_returned,omitempty"`

	// Verdict is the worse of HarnessVerdict and AuditVerdict: SAFE,
	// OVERSOLD, LOST, UNDERSOLD or ERRORS, or SKIPPED when the service
	// refused the run's settings.
	Verdict        string `json:"verdict"`
	HarnessVerdict string `json:"harness_verdict,omitempty"`
	AuditVerdict   string `json:"audit_verdict"`
	// ServiceVerdict is the audit's own word: one of the Audit verdicts.
	ServiceVerdict string   `json:"service_verdict,omitempty"`
	Agree          bool     `json:"agree"`
	Disagreements  []string `json:"disagreements,omitempty"`

	// ErrorCodes counts the errors by the service's code ("lock_timeout"),
	// "http_NNN" when it gave none, "transport" or "timeout".
	ErrorCodes   map[string]int `json:"error_codes,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	// TimedOut: the run hit its time limit before sending everything.
	TimedOut bool `json:"timed_out,omitempty"`
	// Note says why a result is SKIPPED or incomplete.
	Note string `json:"note,omitempty"`
}

// ClassGuesses are a course prediction's answers: more units sold than the
// stock, exactly the stock, or fewer.
var ClassGuesses = []string{"more", "exactly", "fewer"}

// MaxClassPredictions bounds a ClassAnswer's predictions: one per lock a
// lesson compares.
const MaxClassPredictions = 8

// ClassAnswer is one seat's answer to a course lesson: what it predicted
// and what the run showed, the body of POST /api/class/answers.
type ClassAnswer struct {
	Seat    string `json:"seat"`
	Student string `json:"student,omitempty"`
	// Lesson is the course lesson's id.
	Lesson string `json:"lesson"`
	// Run is the lab run the lesson started, when it started one.
	Run         string            `json:"run,omitempty"`
	Predictions []ClassPrediction `json:"predictions"`
	// Held: every prediction held. Set by the service.
	Held bool `json:"held"`
	// At is when the service took the answer. Set by the service.
	At time.Time `json:"at"`
}

// ClassPrediction is a prediction of a lesson, for one lock where the
// lesson compares several ("" where it asks one question).
type ClassPrediction struct {
	Lock      string `json:"lock,omitempty"`
	Predicted string `json:"predicted"` // one of ClassGuesses
	Outcome   string `json:"outcome,omitempty"`
	Held      bool   `json:"held"`
}

// ClassLesson is the class's answers to one lesson, an element of GET
// /api/class/answers: the teacher's view.
type ClassLesson struct {
	Lesson string `json:"lesson"`
	// Seats is how many seats answered; Held, how many saw every
	// prediction hold.
	Seats     int           `json:"seats"`
	Held      int           `json:"held"`
	Predicted []ClassCount  `json:"predicted"`
	Answers   []ClassAnswer `json:"answers"` // oldest first
}

// ClassCount is how many seats made one prediction (for one lock), and of
// them how many saw it hold.
type ClassCount struct {
	Lock      string `json:"lock,omitempty"`
	Predicted string `json:"predicted"`
	Seats     int    `json:"seats"`
	Held      int    `json:"held"`
}
