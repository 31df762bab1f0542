//go:build !linux

package netns

import (
	"fmt"
	"runtime"
)

func doInPath(path string, fn func() error) error {
	return fmt.Errorf("netns: network namespaces need Linux (this is %s)", runtime.GOOS)
}
