package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
)

// startProfiles starts the CPU profile and the execution trace that o asks
// for, for rank, and returns the function that stops them and closes
// their files.
func startProfiles(o options, rank int) (stop func() error, err error) {
	var files []*os.File
	var stops []func()
	stop = func() error {
		for _, s := range stops {
			s()
		}
		var errs []error
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		return errors.Join(errs...)
	}
	create := func(dir, name string) (*os.File, error) {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf(name, rank)))
		if err == nil {
			files = append(files, f)
		}
		return f, err
	}
	if o.profile != "" {
		f, err := create(o.profile, "cpu-rank%d.pprof")
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			_ = stop()
			return nil, fmt.Errorf("--profile: %w", err)
		}
		stops = append(stops, pprof.StopCPUProfile)
	}
	if o.trace != "" {
		f, err := create(o.trace, "trace-rank%d.out")
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			_ = stop()
			return nil, fmt.Errorf("--trace: %w", err)
		}
		stops = append(stops, trace.Stop)
	}
	return stop, nil
}
