package kafkatest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// CacheEnv names the directory under which the broker's jars are cached, one
// kafka-<version> directory per version. Default: ~/.cache/kmaterialize.
const CacheEnv = "KMATERIALIZE_KAFKA_CACHE"

// completeMarker is written into a cache directory after a full copy. It holds
// the sha256 of the pom the jars came from: a cache made from another pom
// (another slf4j, say) is not complete for this one.
const completeMarker = ".kmaterialize-complete"

// dependencyPlugin is the Maven plugin that copies the jars, with its version
// given explicitly so that the fetch does not depend on Maven's defaults.
const dependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0:copy-dependencies"

// Jars is a complete copy of the broker's jars.
type Jars struct {
	Dir     string // the directory that holds the jars (the class path is Dir/*)
	Version string // Apache Kafka's version, from the pom
	Fetched bool   // true if this call copied them; false if the cache was reused
}

// FetchOptions say where the pom and the cache are. The zero value finds the
// pom in the repository and uses the default cache.
type FetchOptions struct {
	// POM is the path of the pom naming the broker. Default: the
	// repository's testdata/kafka/pom.xml, found by walking up from the
	// working directory to go.mod.
	POM string
	// CacheDir holds one kafka-<version> directory per version. Default:
	// $KMATERIALIZE_KAFKA_CACHE, else ~/.cache/kmaterialize.
	CacheDir string
	// Maven is the mvn command. Default: "mvn" on PATH.
	Maven string
	// Log receives Maven's output. Default: discarded (it is returned in the
	// error when Maven fails).
	Log io.Writer
}

// Fetch returns the broker's jars, copying them with Maven first unless the
// cache already holds a complete copy made from the same pom. Concurrent
// fetches of the same version are safe: each copies into its own temporary
// directory and the first rename wins.
func Fetch(ctx context.Context, o FetchOptions) (Jars, error) {
	pom, err := o.pomPath()
	if err != nil {
		return Jars{}, err
	}
	body, err := os.ReadFile(pom)
	if err != nil {
		return Jars{}, fmt.Errorf("kafkatest: read pom: %w", err)
	}
	version, err := pomVersion(body)
	if err != nil {
		return Jars{}, fmt.Errorf("kafkatest: %s: %w", pom, err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])

	cache, err := o.cacheDir()
	if err != nil {
		return Jars{}, err
	}
	dir := filepath.Join(cache, "kafka-"+version)
	if complete(dir, version, hash) {
		return Jars{Dir: dir, Version: version}, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Jars{}, fmt.Errorf("kafkatest: cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, "kafka-"+version+".tmp-")
	if err != nil {
		return Jars{}, fmt.Errorf("kafkatest: cache: %w", err)
	}
	// Until the rename below, a crash leaves only tmp, which no reader
	// takes for the cache; it is removed here on every failure.
	defer os.RemoveAll(tmp)

	mvn := o.Maven
	if mvn == "" {
		mvn = "mvn"
	}
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-Dstyle.color=never", "-f", pom, dependencyPlugin, "-DoutputDirectory="+tmp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if o.Log != nil {
		w := io.MultiWriter(&out, o.Log)
		cmd.Stdout, cmd.Stderr = w, w
	}
	if err := cmd.Run(); err != nil {
		return Jars{}, fmt.Errorf("kafkatest: fetch Apache Kafka %s with Maven (%s): %w\n%s", version, mvn, err, tail(out.String(), 40))
	}
	if !hasBrokerJar(tmp, version) {
		return Jars{}, fmt.Errorf("kafkatest: Maven copied no kafka_2.13-%s.jar into %s\n%s", version, tmp, tail(out.String(), 40))
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMarker), []byte(hash+"\n"), 0o644); err != nil {
		return Jars{}, fmt.Errorf("kafkatest: cache marker: %w", err)
	}
	// An incomplete leftover (no marker, or another pom's) is replaced; a
	// complete copy that another process published meanwhile is kept.
	if !complete(dir, version, hash) {
		if err := os.RemoveAll(dir); err != nil {
			return Jars{}, fmt.Errorf("kafkatest: cache: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil && !complete(dir, version, hash) {
		return Jars{}, fmt.Errorf("kafkatest: publish cache %s: %w", dir, err)
	}
	return Jars{Dir: dir, Version: version, Fetched: true}, nil
}

func (o FetchOptions) pomPath() (string, error) {
	if o.POM != "" {
		return o.POM, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "kafka", "pom.xml"), nil
}

func (o FetchOptions) cacheDir() (string, error) {
	if o.CacheDir != "" {
		return o.CacheDir, nil
	}
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkatest: no cache directory (set %s): %w", CacheEnv, err)
	}
	return filepath.Join(base, "kmaterialize"), nil
}

// RepoRoot returns the directory of the go.mod that encloses the working
// directory (a test's working directory is its package's).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kafkatest: no go.mod above the working directory; set FetchOptions.POM")
		}
		dir = parent
	}
}

var versionRE = regexp.MustCompile(`<kafka\.version>\s*([0-9A-Za-z.\-]+)\s*</kafka\.version>`)

// pomVersion reads the kafka.version property: the pom is the one place the
// version is written.
func pomVersion(pom []byte) (string, error) {
	m := versionRE.FindSubmatch(pom)
	if m == nil {
		return "", errors.New("no <kafka.version> property")
	}
	return string(m[1]), nil
}

// complete reports whether dir is a finished copy made from the pom with this
// hash.
func complete(dir, version, hash string) bool {
	b, err := os.ReadFile(filepath.Join(dir, completeMarker))
	return err == nil && strings.TrimSpace(string(b)) == hash && hasBrokerJar(dir, version)
}

func hasBrokerJar(dir, version string) bool {
	_, err := os.Stat(filepath.Join(dir, "kafka_2.13-"+version+".jar"))
	return err == nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// randomHex returns n random bytes in hex: passwords and names unique to one
// start.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
