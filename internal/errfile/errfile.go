// Package errfile is the failure record a rank leaves for its launcher, as
// torchrun's error files do: when a communicator first fails, the library
// writes one small JSON record (when it failed, which rank it blames, the
// message) to the file named by the COBRE_ERROR_FILE variable, before the
// failing call returns, so that a process that exits the instant it sees
// the error still leaves it. The launcher (cmd/starrun, starbench -n) names
// one file per rank, reads them once every rank has exited, and reports
// the root cause instead of the first rank to exit.
package errfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Env is the environment variable naming the file a rank writes its first
// failure to. Unset or empty: no file is written.
const Env = "COBRE_ERROR_FILE"

// Record is one rank's first failure.
type Record struct {
	// Time is when the failure was returned to the program.
	Time time.Time `json:"time"`
	// Rank is the rank that wrote the record, Size the communicator's size.
	Rank int `json:"rank"`
	Size int `json:"size"`
	// Blamed is the rank at fault as this rank saw it (the Rank of a
	// CollectiveFailedError), or -1 when unknown.
	Blamed int `json:"blamed"`
	// Op is the operation that failed: a collective's name, "start-up" or
	// "close".
	Op string `json:"op"`
	// Message is the error's text.
	Message string `json:"message"`
	// PID is the writing process's id.
	PID int `json:"pid"`
}

// Write stores rec at path unless a record is there already (a rank's first
// failure wins). The file appears whole or not at all: it is written under
// a temporary name in the same directory and linked into place.
func Write(path string, rec Record) error {
	if path == "" {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".errfile-*")
	if err != nil {
		return fmt.Errorf("errfile: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("errfile: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("errfile: %w", err)
	}
	// Link, not rename: it fails when the file exists, so a record never
	// replaces an earlier one.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("errfile: %w", err)
	}
	return nil
}

// Read returns the record at path. A missing file is an error satisfying
// errors.Is(err, fs.ErrNotExist).
func Read(path string) (Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Record{}, err
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("errfile: %s: %w", path, err)
	}
	return rec, nil
}
