//go:build !failpoints

package failpoint

// Enabled reports whether the binary was built with the failpoints tag.
const Enabled = false

// Hit does nothing: the binary was built without the failpoints tag.
func Hit(name string) {}
