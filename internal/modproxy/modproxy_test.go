package modproxy_test

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redisync/redisync/internal/modproxy"
)

// unpublished are the modules of the repository nobody fetches: they may
// replace the root module with the working tree.
var unpublished = map[string]bool{"bench/peers": true}

// TestModulesBuildAsFetched builds and vets every published module of the
// repository other than the root one as `go get` would fetch it: copied out
// of the repository, without go.work, requiring the root module at the
// version its go.mod names, that version served by a proxy made from the
// working tree (other modules come from the module cache or GOPROXY). A
// replace directive, a version of the root module that does not say what
// the working tree is, or a file the root module does not ship fails it.
func TestModulesBuildAsFetched(t *testing.T) {
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	goenv := goEnv(t, "GOPROXY", "GOMODCACHE")
	root := modEdit(t, repo).Module.Path
	proxy, modcache := t.TempDir(), moduleCache(t, repo, root)
	env := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOMODCACHE="+modcache,
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(goenv["GOMODCACHE"], "cache", "download"))+","+goenv["GOPROXY"],
		"GONOSUMDB="+root, // the local version has no checksum in the database
		"GOPRIVATE=", "GONOPROXY=",
		// The same version holds other files at every run: the go command
		// must not reuse the file lists it indexed for it before.
		"GODEBUG=goindex=0",
	)

	var published []string
	for _, m := range subModules(t, repo) {
		if !unpublished[m] {
			published = append(published, m)
		}
	}
	require.NotEmpty(t, published)
	served := map[string]bool{}
	for _, m := range published {
		t.Run(m, func(t *testing.T) {
			mod := modEdit(t, filepath.Join(repo, m))
			for _, r := range mod.Replace {
				require.NotEqual(t, root, r.Old.Path, "%s/go.mod replaces %s: users would not get the replacement", m, root)
			}
			i := slices.IndexFunc(mod.Require, func(r requirement) bool { return r.Path == root })
			require.GreaterOrEqual(t, i, 0, "%s does not require %s", m, root)
			if v := mod.Require[i].Version; !served[v] {
				_, err := modproxy.Write(proxy, repo, v)
				require.NoError(t, err)
				served[v] = true
			}
			dir := filepath.Join(t.TempDir(), path.Base(m))
			copyModule(t, filepath.Join(repo, m), dir)
			for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
				cmd := exec.Command("go", args...)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "go %s in a copy of %s:\n%s", strings.Join(args, " "), m, out)
			}
		})
	}
}

// The root module's zip has its files, without those of nested modules.
func TestWrite(t *testing.T) {
	proxy := t.TempDir()
	path, err := modproxy.Write(proxy, "../..", "v0.0.1")
	require.NoError(t, err)
	require.Equal(t, "github.com/redisync/redisync", path)
	at := filepath.Join(proxy, "github.com", "redisync", "redisync", "@v")
	list, err := os.ReadFile(filepath.Join(at, "list"))
	require.NoError(t, err)
	require.Equal(t, "v0.0.1\n", string(list))
	z, err := zip.OpenReader(filepath.Join(at, "v0.0.1.zip"))
	require.NoError(t, err)
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, f.Name)
		require.False(t, strings.HasPrefix(f.Name, path+"@v0.0.1/otel/"), "%s belongs to another module", f.Name)
	}
	require.Contains(t, names, path+"@v0.0.1/go.mod")
	require.Contains(t, names, path+"@v0.0.1/lua/acquire.lua")
}

// moduleCache returns a module cache of the repository's own, kept between
// runs so that the other modules stay where they were extracted and their
// compiled packages in the build cache, without the versions of the
// repository's modules an earlier run fetched.
func moduleCache(t *testing.T, repo, root string) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		return t.TempDir()
	}
	sum := sha256.Sum256([]byte(repo))
	dir := filepath.Join(base, "redisync-modules-test", hex.EncodeToString(sum[:6]))
	for _, d := range []string{dir, filepath.Join(dir, "cache", "download")} {
		require.NoError(t, os.RemoveAll(filepath.Join(d, filepath.FromSlash(path.Dir(root)))))
	}
	return dir
}

type requirement struct{ Path, Version string }

// goMod is the part of `go mod edit -json` the test reads.
type goMod struct {
	Module  struct{ Path string }
	Require []requirement
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func modEdit(t *testing.T, dir string) goMod {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	require.NoError(t, err, "go mod edit -json in %s", dir)
	var m goMod
	require.NoError(t, json.Unmarshal(out, &m))
	return m
}

func goEnv(t *testing.T, names ...string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"env", "-json"}, names...)...).Output()
	require.NoError(t, err)
	env := map[string]string{}
	require.NoError(t, json.Unmarshal(out, &env))
	return env
}

// subModules lists the directories, relative to repo, of the modules
// nested in it.
func subModules(t *testing.T, repo string) []string {
	t.Helper()
	var mods []string
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata"):
			return fs.SkipDir
		case d.Name() != "go.mod" || filepath.Dir(p) == repo:
			return nil
		}
		rel, err := filepath.Rel(repo, filepath.Dir(p))
		mods = append(mods, filepath.ToSlash(rel))
		return err
	})
	require.NoError(t, err)
	return mods
}

// copyModule copies the files of the module in src to dst.
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	files, err := modproxy.Files(src)
	require.NoError(t, err)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		to := filepath.Join(dst, filepath.FromSlash(f))
		require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
		require.NoError(t, os.WriteFile(to, data, 0o644))
	}
}
