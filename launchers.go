package starcomm

import (
	"fmt"
	"strings"
)

// Launcher variables: when COBRE_TCP_RANK is unset, the rank (and size)
// come from the launcher that started the process, as torchrun and mpi4py
// detect theirs. The first launcher in launchers whose rank variable is set
// wins: Open MPI's mpirun, then Slurm, then a Kubernetes Indexed Job (the
// innermost launcher first: mpirun inside a Slurm allocation sets both).
const (
	EnvOMPIRank    = "OMPI_COMM_WORLD_RANK"
	EnvOMPISize    = "OMPI_COMM_WORLD_SIZE"
	EnvSlurmProcID = "SLURM_PROCID"
	EnvSlurmNTasks = "SLURM_NTASKS"
	// EnvJobIndex is a Kubernetes Indexed Job's completion index: the
	// rank. Kubernetes gives no size: COBRE_TCP_SIZE must be set with it.
	EnvJobIndex = "JOB_COMPLETION_INDEX"
)

// launcher is one launcher's rank and size variables.
type launcher struct {
	name string // the launcher, as errors name it
	rank string // its rank variable
	size string // its size variable; "" when COBRE_TCP_SIZE gives the size
}

// launchers, in order of precedence.
var launchers = []launcher{
	{"Open MPI mpirun", EnvOMPIRank, EnvOMPISize},
	{"Slurm", EnvSlurmProcID, EnvSlurmNTasks},
	{"Kubernetes Indexed Job", EnvJobIndex, ""},
}

// rankSource says where COBRE_TCP_RANK's and COBRE_TCP_SIZE's values came
// from when a launcher's variables stood in for them.
type rankSource struct {
	l          *launcher
	names      map[string]string // COBRE_TCP_RANK / COBRE_TCP_SIZE -> the variable read
	rank, size string            // the values read
}

// name writes a variable's name as errors show it: the launcher's variable
// that was read in its place, or the name itself.
func (s *rankSource) name(n string) string {
	if s != nil {
		if m, ok := s.names[n]; ok {
			return m
		}
	}
	return n
}

// rename writes, in msg, the names of the rank and size variables as the
// ones read in their place (SLURM_NTASKS for COBRE_TCP_SIZE, say): errors
// name the variable that was read.
func (s *rankSource) rename(msg string) string {
	for _, n := range []string{EnvRank, EnvSize} {
		msg = strings.ReplaceAll(msg, n, s.name(n))
	}
	return msg
}

// note explains, for an error about the rank or size, where they came from.
func (s *rankSource) note(n string) string {
	if s == nil || s.names[n] == "" {
		return ""
	}
	return fmt.Sprintf(" (rank %s from %s, size %s from %s: %s's variables, read because %s is unset)", s.rank, s.names[EnvRank], s.size, s.name(EnvSize), s.l.name, EnvRank)
}

// from lists the variables the rank and size were read from, as
// Config.RankFrom holds them.
func (s *rankSource) from() string {
	if s == nil {
		return ""
	}
	return s.names[EnvRank] + ", " + s.name(EnvSize)
}

// fromLaunchers returns lookup with the rank and size of the launcher that
// started the process standing in for COBRE_TCP_RANK and COBRE_TCP_SIZE,
// and where they came from; or lookup itself and nil when COBRE_TCP_RANK is
// set or no launcher's variables are. A launcher whose variables are
// incomplete, or whose size conflicts with COBRE_TCP_SIZE, is an error
// naming the variables.
func fromLaunchers(lookup func(string) (string, bool)) (func(string) (string, bool), *rankSource, error) {
	get := func(n string) string { v, _ := lookup(n); return strings.TrimSpace(v) }
	if get(EnvRank) != "" {
		return lookup, nil, nil
	}
	for i := range launchers {
		l := &launchers[i]
		rank := get(l.rank)
		if rank == "" {
			continue
		}
		src := &rankSource{l: l, names: map[string]string{EnvRank: l.rank}}
		size, explicit := get(l.size), get(EnvSize)
		switch {
		case l.size == "" && explicit == "":
			return lookup, nil, &InvalidConfigurationError{Var: l.rank, Value: rank,
				Allowed: fmt.Sprintf("a %s gives the rank but not the size: set %s (the job's completions) with it, or set %s and %s", l.name, EnvSize, EnvRank, EnvSize)}
		case l.size == "":
			size = explicit
		case size == "":
			return lookup, nil, &InvalidConfigurationError{Var: l.rank, Value: rank,
				Allowed: fmt.Sprintf("%s's rank, but %s, the size, is unset: set it, or set %s and %s", l.name, l.size, EnvRank, EnvSize)}
		case explicit != "" && explicit != size:
			return lookup, nil, &InvalidConfigurationError{Var: EnvSize, Value: explicit,
				Allowed: fmt.Sprintf("conflicts with %s=%s: %s is unset, so the rank comes from %s (%s) and the size from %s; leave %s unset or set %s too", l.size, size, EnvRank, l.rank, l.name, l.size, EnvSize, EnvRank)}
		default:
			src.names[EnvSize] = l.size
		}
		src.rank, src.size = rank, size
		return func(n string) (string, bool) {
			switch n {
			case EnvRank:
				return rank, true
			case EnvSize:
				return size, true
			}
			return lookup(n)
		}, src, nil
	}
	return lookup, nil, nil
}
