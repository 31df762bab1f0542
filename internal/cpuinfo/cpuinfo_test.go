package cpuinfo

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"intel", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\nmodel name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\n\nprocessor\t: 1\ncpu family\t: 7\nmodel\t\t: 1\nmodel name\t: Other\n",
			"Intel(R) Xeon(R) Processor (family 6, model 207)"},
		{"amd", "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n",
			"AMD EPYC 9R14 96-Core Processor (family 25, model 17)"},
		{"no-numbers", "processor\t: 0\nmodel name\t: ARMv8 Processor rev 1 (v8l)\n", "ARMv8 Processor rev 1 (v8l)"},
		{"family-only", "model name\t: X\ncpu family\t: 6\n", "X (family 6)"},
		{"no-name", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n", runtime.GOARCH},
		{"empty", "", runtime.GOARCH},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Parse(tc.in)) })
	}
}

// TestModel: where /proc/cpuinfo names the processor, Model begins with
// that name; elsewhere it is GOARCH.
func TestModel(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || !strings.Contains(string(b), "model name") {
		assert.Equal(t, runtime.GOARCH, Model())
		return
	}
	_, rest, _ := strings.Cut(string(b), "model name")
	_, name, _ := strings.Cut(rest, ":")
	name, _, _ = strings.Cut(name, "\n")
	assert.True(t, strings.HasPrefix(Model(), strings.TrimSpace(name)), "Model() = %q, /proc/cpuinfo names %q", Model(), name)
}
