package kafkatest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests need neither Java nor Maven: they prove the cache rules with a
// Maven command that cannot run, so any attempt to fetch is an error.

// testPOM copies the repository's pom into dir (its hash is what a complete
// cache must carry) and returns its path and version.
func testPOM(t *testing.T, dir string) (string, string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(root, "testdata", "kafka", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	version, err := pomVersion(body)
	if err != nil {
		t.Fatal(err)
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return pom, version
}

// fakeJars makes dir look like a copy of version's jars; marker is the
// complete-marker's content, or "" for none.
func fakeJars(t *testing.T, dir, version, marker string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kafka_2.13-"+version+".jar"), []byte("jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	if marker != "" {
		if err := os.WriteFile(filepath.Join(dir, completeMarker), []byte(marker+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFetchReusesCompleteCache: a cache marked complete for this pom is used
// as it is, without Maven.
func TestFetchReusesCompleteCache(t *testing.T) {
	dir := t.TempDir()
	pom, version := testPOM(t, dir)
	cache := filepath.Join(dir, "cache")
	fakeJars(t, filepath.Join(cache, "kafka-"+version), version, pomHash(t, pom))

	jars, err := Fetch(context.Background(), FetchOptions{POM: pom, CacheDir: cache, Maven: filepath.Join(dir, "no-mvn")})
	if err != nil {
		t.Fatalf("Fetch with a complete cache: %v", err)
	}
	if jars.Fetched || jars.Dir != filepath.Join(cache, "kafka-"+version) || jars.Version != version {
		t.Fatalf("Fetch = %+v, want the cache kafka-%s reused", jars, version)
	}
}

// TestFetchRefetchesIncompleteCache: a copy without the marker (a fetch that
// died), or with another pom's hash, is not used: Fetch runs Maven (which
// here cannot run, so the error names it) and leaves no temporary directory.
func TestFetchRefetchesIncompleteCache(t *testing.T) {
	for name, marker := range map[string]string{"no marker": "", "another pom": strings.Repeat("0", 64)} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pom, version := testPOM(t, dir)
			cache := filepath.Join(dir, "cache")
			fakeJars(t, filepath.Join(cache, "kafka-"+version), version, marker)
			mvn := filepath.Join(dir, "no-mvn")

			_, err := Fetch(context.Background(), FetchOptions{POM: pom, CacheDir: cache, Maven: mvn})
			if err == nil || !strings.Contains(err.Error(), "with Maven ("+mvn+")") {
				t.Fatalf("Fetch with an incomplete cache: %v, want Maven's failure", err)
			}
			entries, err := os.ReadDir(cache)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "kafka-"+version {
				t.Fatalf("cache holds %v after a failed fetch, want only kafka-%s", entries, version)
			}
		})
	}
}

func pomHash(t *testing.T, pom string) string {
	t.Helper()
	body, err := os.ReadFile(pom)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}
