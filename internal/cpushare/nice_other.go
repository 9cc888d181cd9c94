//go:build !linux

package cpushare

// lowerThread sets no priority outside Linux (threads share the
// process's); fn runs as it would without a share.
func lowerThread(int) bool { return false }
