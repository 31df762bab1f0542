//go:build !linux

package starcomm_test

// shmChildMain: the shm backend's real-process tests run on Linux only.
func shmChildMain() {}
