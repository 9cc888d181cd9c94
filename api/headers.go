package api

// Headers of the API's answers.
const (
	// HeaderGeneration is the generation an answer was read from (GET
	// .../keys/{key}, .../keys, .../export, .../count); a page's request
	// sends it back to stay on that generation.
	HeaderGeneration = "Kmaterialize-Generation"
	// HeaderMore is "true" on a page of rows that more rows follow.
	HeaderMore = "Kmaterialize-More"
	// HeaderPositions is the positions (Positions.String) the table was
	// at in the read transaction of an answer (every read of a table:
	// keys, rows, count, export, its status, and their 404s), beside
	// HeaderGeneration; absent when longer than MaxHeaderBytes.
	HeaderPositions = "Kmaterialize-Positions"
	// HeaderCursor is the same state as an opaque Cursor (Cursor.String):
	// generation, epoch and positions, what a change feed's from= takes;
	// absent when longer than MaxHeaderBytes.
	HeaderCursor = "Kmaterialize-Cursor"
	// HeaderDiff says which generations a diff compared: "FROM..TO".
	HeaderDiff = "X-Kmaterialize-Diff"
	// HeaderBackupSHA256 is the SHA-256 (hex) of a backup's bytes (GET
	// /v1/backup): a receiver checks the copy it wrote against it.
	HeaderBackupSHA256 = "Kmaterialize-Backup-Sha256"
	// HeaderBackupTxID is the id of the read transaction a backup copied:
	// the database's state it is.
	HeaderBackupTxID = "Kmaterialize-Backup-Txid"
	// HeaderPartial is "true" on a 404 key_not_found of a table that holds
	// some of its topic's partitions and has no partitioner: the key may
	// be in a partition another daemon holds (docs/shards.md).
	HeaderPartial = "Kmaterialize-Partial"
)
