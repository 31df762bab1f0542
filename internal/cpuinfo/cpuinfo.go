// Package cpuinfo names the processor a benchmark ran on, for the headers
// of starbench's and nsbench's tables: figures from different processors
// (an AMD EPYC and an Intel Xeon of the same machine kind, say) are not
// comparable, and the marketing name alone ("Intel(R) Xeon(R) Processor")
// does not tell two generations apart, so the name comes with the family
// and model numbers.
package cpuinfo

import (
	"os"
	"runtime"
	"strings"
)

// Model returns the processor's name as /proc/cpuinfo gives it for the
// first processor, followed by its family and model numbers when the file
// has them: "AMD EPYC 9R14 96-Core Processor (family 25, model 17)". Where
// there is no /proc/cpuinfo (outside Linux) or no name in it, it returns
// runtime.GOARCH.
func Model() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	return Parse(string(b))
}

// Parse is Model for the text of a /proc/cpuinfo.
func Parse(cpuinfo string) string {
	var name, family, model string
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k == "processor" && name != "":
			// The second processor: the first one's fields are all read.
			return join(name, family, model)
		case k == "model name" && name == "":
			name = v
		case k == "cpu family" && family == "":
			family = v
		case k == "model" && model == "":
			model = v
		}
	}
	if name == "" {
		return runtime.GOARCH
	}
	return join(name, family, model)
}

func join(name, family, model string) string {
	switch {
	case family != "" && model != "":
		return name + " (family " + family + ", model " + model + ")"
	case family != "":
		return name + " (family " + family + ")"
	}
	return name
}
