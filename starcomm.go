package starcomm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/mtls"
	"github.com/starcomm/starcomm/transport/tcp"
)

// FromEnv builds this process's communicator from the COBRE_* environment
// variables: the one call a program makes at start-up. See ConfigFromEnv
// for the configuration errors and New for the start-up errors. Either is
// recorded in COBRE_ERROR_FILE (when set) like any other failure of this
// rank, so that the launcher names this rank and the error.
func FromEnv(ctx context.Context) (comm.Communicator, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		RecordConfigError(cfg, err)
		return nil, err
	}
	return New(ctx, cfg)
}

// RecordConfigError records err, the error ConfigFromEnv returned with cfg,
// in this rank's COBRE_ERROR_FILE (cfg.ErrorFile, or the variable itself
// when cfg could not hold it), blaming this rank, as FromEnv and New do for
// their failures: for a program that reads the variables, adjusts the
// Config and calls New itself, so that its launcher names the rank whose
// configuration was refused. Without an error file it does nothing.
func RecordConfigError(cfg Config, err error) {
	path := cfg.ErrorFile
	if path == "" {
		path = strings.TrimSpace(os.Getenv(EnvErrorFile))
	}
	recordFailure(path, star.Failure{Op: star.OpStartup, Rank: cfg.Rank, Blamed: cfg.Rank, Err: err}, cfg.Size)
}

// recordFailure writes f to the error file at path (none when path is
// empty), for the launcher; see internal/errfile. A failure to write it is
// reported on stderr: it must not hide the failure being recorded.
func recordFailure(path string, f star.Failure, size int) {
	if path == "" {
		return
	}
	rec := errfile.Record{Time: time.Now(), Rank: f.Rank, Size: size, Blamed: f.Blamed, Op: f.Op, Message: f.Err.Error(), PID: os.Getpid()}
	if err := errfile.Write(path, rec); err != nil {
		fmt.Fprintf(os.Stderr, "starcomm: rank %d: cannot record its failure in %s=%s: %v\n", f.Rank, EnvErrorFile, path, err)
	}
}

// New builds a communicator for cfg's backend:
//   - local: the single-rank comm.Local;
//   - tcp: the star protocol over TCP; rank 0 listens on BindAddr:Port and
//     waits for every worker, workers dial Coordinator:Port (retrying with
//     backoff until ConnectTimeout); a size-1 tcp communicator opens no
//     socket;
//   - shm: a *shm.Comm, every rank a process of this host sharing the
//     segment ShmName (Linux; elsewhere a *comm.BackendNotAvailableError);
//     it returns once every rank has joined, within ConnectTimeout.
//
// A bad cfg is an *InvalidConfigurationError or *comm.InvalidBackendError;
// a failed start-up is a *comm.InitializationFailedError, whose message
// names cfg.RankFrom when a launcher's variables gave the rank ("rank 2 of
// 4 from SLURM_PROCID, SLURM_NTASKS: ...").
//
// Whatever the error, New records it in cfg.ErrorFile (when set) before
// it returns, as the rank's start-up failure, with the message New
// returns: the shm backend's own record when it made one (naming the rank
// at fault); else one that blames the rank at fault when the error names
// one (a worker: the rank a start-up Abort from rank 0 names, or rank 0
// itself when it could not be reached within ConnectTimeout, or closed,
// reset or said nothing on the connection before it answered; rank 0: the
// first rank that never registered), and this rank otherwise.
func New(ctx context.Context, cfg Config) (comm.Communicator, error) {
	blamed := -1
	c, err := start(ctx, cfg, &blamed)
	if err != nil {
		// A record the backend wrote first stays: the first one wins.
		if blamed < 0 {
			blamed = startupBlamed(cfg.Rank, err)
		}
		recordFailure(cfg.ErrorFile, star.Failure{Op: star.OpStartup, Rank: cfg.Rank, Blamed: blamed, Err: err}, cfg.Size)
	}
	return c, err
}

// start is New but for the error file. The tcp backend leaves its start-up
// failure to New, which records it with the origin of the rank in its
// message; it sets *blamed to the rank at fault when it knows one.
func start(ctx context.Context, cfg Config, blamed *int) (comm.Communicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var c comm.Communicator
	var err error
	switch cfg.resolve() {
	case BackendLocal:
		return comm.NewLocal(), nil
	case BackendShm:
		c, err = newShm(ctx, cfg)
	default:
		c, err = newTCP(ctx, cfg, blamed)
	}
	var ife *comm.InitializationFailedError
	if err != nil && cfg.RankFrom != "" && errors.As(err, &ife) {
		// Say where the rank came from: a launcher's variables, not
		// COBRE_TCP_RANK (see Config.RankFrom).
		ife.Err = fmt.Errorf("rank %d of %d from %s: %w", cfg.Rank, cfg.Size, cfg.RankFrom, ife.Err)
	}
	return c, err
}

// startupBlamed is the rank a failed start-up of rank blames: the rank at
// fault a start-up Abort names, else rank itself (its configuration, its
// listener, its files).
func startupBlamed(rank int, err error) int {
	var ab *star.AbortError
	if errors.As(err, &ab) && ab.Rank >= 0 {
		return ab.Rank
	}
	return rank
}

// newShm starts the shm backend. Its first failure is recorded in the
// error file as the tcp backend's is.
func newShm(ctx context.Context, cfg Config) (comm.Communicator, error) {
	sc := shm.CommConfig{
		Name:           cfg.ShmName,
		Rank:           cfg.Rank,
		Size:           cfg.Size,
		Timeout:        cfg.ShmTimeout,
		ConnectTimeout: cfg.ConnectTimeout,
	}
	if cfg.ErrorFile != "" {
		sc.OnFailure = func(f shm.Failure) {
			recordFailure(cfg.ErrorFile, star.Failure{Op: f.Op, Rank: f.Rank, Blamed: f.Blamed, Err: f.Err}, cfg.Size)
		}
	}
	c, err := shm.New(ctx, sc)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// newTCP starts the tcp backend. Its failures after start-up are recorded
// in the error file by star; a failed start-up is left to New, with the
// rank at fault in *blamed when star names one.
func newTCP(ctx context.Context, cfg Config, blamed *int) (comm.Communicator, error) {
	tc := tcp.DefaultConfig()
	tc.BindAddr = bareHost(cfg.BindAddr)
	// TCP_USER_TIMEOUT holds at most about 24.8 days; a longer collective
	// timeout still applies to the collectives, the socket option is capped.
	tc.Timeout = min(cfg.Timeout, tcp.MaxUserTimeout)
	tc.ConnectTimeout = cfg.ConnectTimeout
	tc.BufferSize = cfg.BufferBytes
	if err := tc.Validate(); err != nil {
		return nil, &comm.InitializationFailedError{Backend: BackendTCP, Err: err}
	}
	token, err := cfg.token()
	if err != nil {
		return nil, err
	}
	sc := star.DefaultConfig()
	sc.Token = token
	sc.Rank, sc.Size = cfg.Rank, cfg.Size
	sc.Timeout = cfg.Timeout
	sc.ConnectTimeout = cfg.ConnectTimeout
	sc.Spin, sc.SpinMax = starSpins(cfg, tcp.CanPoll)
	sc.Liveness = cfg.Liveness
	if sc.Liveness == 0 {
		sc.Liveness = -1 // COBRE_TCP_LIVENESS_SECS=0: no control session
	}
	sc.Logger = cfg.logger()
	sc.CheckCollectives = strings.EqualFold(cfg.Debug, DebugDetail)
	if cfg.ErrorFile != "" {
		sc.OnFailure = func(f star.Failure) {
			if f.Op == star.OpStartup { // called before star.New returns
				*blamed = f.Blamed
				return
			}
			recordFailure(cfg.ErrorFile, f, cfg.Size)
		}
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil { // a TLS file that cannot be used (New records it)
		return nil, err
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
		if tlsCfg != nil {
			if sc.Listener, err = mtls.NewListener(ln, *tlsCfg); err != nil {
				_ = ln.Close()
				return nil, &comm.InitializationFailedError{Backend: BackendTCP, Err: err}
			}
		}
	default:
		sc.Dialer = tcp.NewDialer(tc)
		sc.Addr = net.JoinHostPort(bareHost(cfg.Coordinator), strconv.Itoa(cfg.Port))
		if tlsCfg != nil {
			if sc.Dialer, err = mtls.NewDialer(sc.Dialer, *tlsCfg); err != nil {
				return nil, &comm.InitializationFailedError{Backend: BackendTCP, Err: err}
			}
		}
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
// by this package (shm.For): the shm backend's POSIX shared memory (rank 0
// the one leader, regions every rank maps); for the local and tcp
// backends the heap fallback, where every rank is a leader with its own
// copy.
func SharedMemory(c comm.Communicator) shm.Provider {
	return shm.For(c)
}

// starSpins returns star.Config's Spin and SpinMax for cfg: Spin 0
// (COBRE_TCP_SPIN_US=0), or sockets that cannot be polled here, turn
// polling off (-1); SpinMax 0 (COBRE_TCP_SPIN_MAX_US=0) keeps the spin at
// Spin (-1: star's zero would mean its default).
func starSpins(cfg Config, canPoll bool) (spin, spinMax time.Duration) {
	spin, spinMax = cfg.Spin, cfg.SpinMax
	if spin == 0 || !canPoll {
		spin = -1
	}
	if spinMax == 0 {
		spinMax = -1
	}
	return spin, spinMax
}
