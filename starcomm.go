package starcomm

import (
	"context"
	"net"
	"strconv"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/tcp"
)

// FromEnv builds this process's communicator from the COBRE_* environment
// variables: the one call a program makes at start-up. See ConfigFromEnv
// for the configuration errors and New for the start-up errors.
func FromEnv(ctx context.Context) (comm.Communicator, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}

// New builds a communicator for cfg's backend:
//   - local: the single-rank comm.Local;
//   - tcp: the star protocol over TCP; rank 0 listens on BindAddr:Port and
//     waits for every worker, workers dial Coordinator:Port (retrying with
//     backoff until ConnectTimeout); a size-1 tcp communicator opens no
//     socket;
//   - shm: a *comm.BackendNotAvailableError (not implemented yet).
//
// A bad cfg is an *InvalidConfigurationError or *comm.InvalidBackendError;
// a failed start-up is a *comm.InitializationFailedError.
func New(ctx context.Context, cfg Config) (comm.Communicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.resolve() {
	case BackendLocal:
		return comm.NewLocal(), nil
	case BackendShm:
		return nil, &comm.BackendNotAvailableError{Backend: BackendShm,
			Reason: "the POSIX shared-memory backend is not implemented yet; use tcp (set " + EnvCoordinator + ") or local"}
	}
	return newTCP(ctx, cfg)
}

func newTCP(ctx context.Context, cfg Config) (comm.Communicator, error) {
	tc := tcp.DefaultConfig()
	tc.BindAddr = cfg.BindAddr
	tc.Timeout = cfg.Timeout
	tc.ConnectTimeout = cfg.ConnectTimeout
	if err := tc.Validate(); err != nil {
		return nil, &comm.InitializationFailedError{Backend: BackendTCP, Err: err}
	}
	sc := star.DefaultConfig()
	sc.Rank, sc.Size = cfg.Rank, cfg.Size
	sc.Timeout = cfg.Timeout
	sc.ConnectTimeout = cfg.ConnectTimeout
	sc.Spin = cfg.Spin
	if sc.Spin == 0 || !tcp.CanPoll {
		sc.Spin = -1 // COBRE_TCP_SPIN_US=0, or sockets that cannot be polled here
	}
	switch {
	case cfg.Size == 1:
	case cfg.Rank == 0:
		ln, err := tcp.Listen(tc, cfg.Port)
		if err != nil {
			return nil, &comm.InitializationFailedError{Backend: BackendTCP, Err: err}
		}
		if cfg.Listening != nil {
			cfg.Listening(ln.Port())
		}
		sc.Listener = ln
	default:
		sc.Dialer = tcp.NewDialer(tc)
		sc.Addr = net.JoinHostPort(cfg.Coordinator, strconv.Itoa(cfg.Port))
	}
	c, err := star.New(ctx, sc)
	if err != nil {
		var ife *comm.InitializationFailedError
		if asInit(err, &ife) {
			ife.Backend = BackendTCP
		}
		return nil, err
	}
	return c, nil
}

func asInit(err error, target **comm.InitializationFailedError) bool {
	e, ok := err.(*comm.InitializationFailedError)
	if ok {
		*target = e
	}
	return ok
}

// SharedMemory returns the shared-memory provider of a communicator built
// by this package. The local and tcp backends use the heap fallback: every
// rank is a leader with its own copy (spec section 7).
func SharedMemory(c comm.Communicator) shm.Provider {
	return shm.HeapFallback(c)
}
