package testkit

func sharedMemoryCases() []Case { return nil }
