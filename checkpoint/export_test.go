package checkpoint

// Names the external tests (package checkpoint_test, which imports store,
// which imports this package) reach to write a raw checkpoint.
const ValueLen = valueLen

var BucketPartitions = bucketPartitions
