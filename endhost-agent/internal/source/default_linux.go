package source

// Default is the source for this operating system.
func Default() Source { return NewNetlink("/proc") }
