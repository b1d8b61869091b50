// Package atomicfile replaces whole files durably: a reader sees the old
// content or the new, never part of either, and once WriteFile has returned
// a crash of the machine keeps the new content. vcoild's checkpoint, the CNI
// installer and the webhook certificate all write through it.
//
// It does not stream: data is one byte slice, for files of a few kilobytes or
// megabytes. It does not create directories.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// tempPrefix starts the name of every temporary file, so that RemoveTemps
// finds those of a writer that was killed, and so that no CNI runtime or
// glob for "*.json" or "*.conflist" takes one for a finished file.
const tempPrefix = ".tmp-"

// WriteFile replaces path with data and mode (exactly mode: the umask does
// not apply). The data goes to a temporary file in path's directory, which is
// synced, given its mode and renamed over path; then the directory is synced
// so that the rename survives a crash. A process that has path open, or is
// running it, keeps the old file. On any error the temporary file is removed
// and path is as it was, unless only the directory's sync failed.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	merr := f.Chmod(mode)
	serr := f.Sync()
	cerr := f.Close()
	err = errors.Join(werr, merr, serr, cerr)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir makes the renames, creations and removals of entries in dir
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// RemoveTemps removes the temporary files that writers killed before their
// rename left in dir. Call it before writing to dir, never while another
// process may be writing there.
func RemoveTemps(dir string) error {
	temps, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range temps {
		if err := os.Remove(t); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
