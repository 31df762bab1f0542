package shm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// envConformanceDir marks a conformance child (the test binary re-run as
// one rank) and names the directory its cases share.
const envConformanceDir = "STARCOMM_TEST_SHM_CONFORMANCE_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envConformanceDir); dir != "" {
		os.Exit(conformanceChild(dir))
	}
	if mode := os.Getenv(envStartChild); mode != "" {
		os.Exit(startChild(mode))
	}
	if mode := os.Getenv(testkit.ShmChildEnv); mode != "" {
		os.Exit(testkit.ShmChild(mode, func(ctx context.Context) (comm.Communicator, error) {
			cfg, err := configFromEnv()
			if err != nil {
				return nil, err
			}
			return shm.New(ctx, cfg)
		}))
	}
	os.Exit(m.Run())
}

// configFromEnv reads the variables the root package's configuration would
// (the shm package does not read the environment itself).
func configFromEnv() (shm.CommConfig, error) {
	cfg := shm.CommConfig{Name: os.Getenv("COBRE_SHM_NAME")}
	var err error
	if cfg.Rank, err = strconv.Atoi(os.Getenv("COBRE_TCP_RANK")); err != nil {
		return cfg, err
	}
	if cfg.Size, err = strconv.Atoi(os.Getenv("COBRE_TCP_SIZE")); err != nil {
		return cfg, err
	}
	if v := os.Getenv("COBRE_SHM_TIMEOUT_SECS"); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return cfg, err
		}
		cfg.Timeout = time.Duration(secs * float64(time.Second))
	}
	if v := os.Getenv("COBRE_TCP_CONNECT_TIMEOUT_MS"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil {
			return cfg, err
		}
		cfg.ConnectTimeout = time.Duration(ms) * time.Millisecond
	}
	return cfg, nil
}

// conformanceChild runs every conformance case for its size as one rank,
// each on a fresh communicator (segment NAME-case), and prints one line per
// case.
func conformanceChild(dir string) int {
	base, err := configFromEnv()
	if err != nil {
		fmt.Printf("FAIL config: %v\n", err)
		return 1
	}
	failed := 0
	for _, tc := range testkit.Cases() {
		if tc.Sizes != nil && !tc.Sizes(base.Size) {
			continue
		}
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := base
			cfg.Name = base.Name + "-" + strings.ReplaceAll(tc.Name, "_", "-")
			c, err := shm.New(ctx, cfg)
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			defer c.Close()
			if c.Rank() != base.Rank {
				return fmt.Errorf("communicator says rank %d, environment %d", c.Rank(), base.Rank)
			}
			if err := tc.Run(ctx, testkit.Env{Comm: c, Dir: dir}); err != nil {
				return err
			}
			if tc.Breaks {
				return nil
			}
			return c.Barrier(ctx)
		}()
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", tc.Name, strings.ReplaceAll(err.Error(), "\n", " | "))
		} else {
			fmt.Printf("ok %s\n", tc.Name)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}
