package api

// Headers of the API's answers.
const (
	// HeaderGeneration is the generation an answer was read from (GET
	// .../keys/{key}, .../keys, .../export, .../count); a page's request
	// sends it back to stay on that generation.
	HeaderGeneration = "Kmaterialize-Generation"
	// HeaderMore is "true" on a page of rows that more rows follow.
	HeaderMore = "Kmaterialize-More"
	// HeaderDiff says which generations a diff compared: "FROM..TO".
	HeaderDiff = "X-Kmaterialize-Diff"
)
