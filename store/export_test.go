package store

// Exported for the external tests (package store_test), which can import
// packages that import store (checkpoint, internal/dbdamage).
var (
	TestPageCheck = testPageCheck
	EnvHold       = envHold
)
