// Package modproxy writes a Go module proxy in the layout GOPROXY=file://
// reads: one version of a module, made of the files of a directory, as the
// go command fetches it once that version is tagged. The tests use it to
// build the repository's other modules against the root module as their
// users get it.
package modproxy

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// Write adds the module whose go.mod is in dir, at version, to the proxy
// rooted at root, and returns the module's path. The module's zip holds
// its Files, as the go command would zip them.
func Write(root, dir, version string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	path, err := modulePath(gomod)
	if err != nil {
		return "", fmt.Errorf("modproxy: %s: %w", dir, err)
	}
	at := filepath.Join(root, filepath.FromSlash(escape(path)), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct{ Version, Time string }{version, time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"list":                    []byte(version + "\n"),
		escape(version) + ".info": info,
		escape(version) + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return path, writeZip(filepath.Join(at, escape(version)+".zip"), dir, path+"@"+version)
}

// writeZip zips the module's files in dir under prefix/.
func writeZip(name, dir, prefix string) (err error) {
	files, err := Files(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	z := zip.NewWriter(f)
	for _, rel := range files {
		if err := addFile(z, prefix+"/"+rel, filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
			return errors.Join(err, z.Close())
		}
	}
	return z.Close()
}

func addFile(z *zip.Writer, name, path string) error {
	w, err := z.Create(name)
	if err != nil {
		return err
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = io.Copy(w, src)
	return err
}

// Files lists the files of the module whose go.mod is in dir, as paths
// relative to dir with forward slashes: its regular files, outside the
// directories of nested modules (those with a go.mod of their own) and of
// version control.
func Files(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return skipDir(dir, p, d)
		case !d.Type().IsRegular():
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	return files, err
}

// skipDir returns fs.SkipDir for a directory under root that is not part
// of root's module: version control, or a nested module.
func skipDir(root, p string, d fs.DirEntry) error {
	switch d.Name() {
	case ".git", ".hg", ".svn", ".bzr":
		return fs.SkipDir
	}
	if p != root {
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return fs.SkipDir
		}
	}
	return nil
}

// modulePath reads the module directive of a go.mod file.
func modulePath(gomod []byte) (string, error) {
	for line := range strings.Lines(string(gomod)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", errors.New("no module directive in go.mod")
}

// escape writes a module path or version as proxies do: each capital letter
// as '!' and its lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
