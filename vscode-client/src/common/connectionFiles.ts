/** Candidate kernel connection files for "CRANE: Attach to kernel…" (the runtime dirs VS Code and Jupyter use). */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface ConnectionFile {
  path: string;
  mtimeMs: number;
}

/**
 * Jupyter runtime directories, where VS Code's Jupyter extension and jupyter_core put connection files:
 * `$JUPYTER_RUNTIME_DIR`; on Linux `$XDG_RUNTIME_DIR/jupyter/runtime` (the Jupyter extension), jupyter_core's
 * `$JUPYTER_DATA_DIR/runtime` or `$XDG_DATA_HOME/jupyter/runtime`, and the classic `~/.local/share/jupyter/runtime`
 * (the Jupyter extension uses it whatever JUPYTER_DATA_DIR/XDG_DATA_HOME say); the macOS and Windows
 * equivalents; and the Jupyter extension's fallback when those are not writable:
 * `<its global storage>/version-<v>/jupyter/runtime`.
 */
export function runtimeDirs(
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
  home: string = os.homedir(),
  jupyterStorage?: string,
): string[] {
  const dirs: string[] = [];
  if (env.JUPYTER_RUNTIME_DIR) {
    dirs.push(env.JUPYTER_RUNTIME_DIR);
  }
  if (env.JUPYTER_DATA_DIR) {
    dirs.push(path.join(env.JUPYTER_DATA_DIR, 'runtime'));
  }
  if (platform === 'darwin') {
    dirs.push(path.join(home, 'Library', 'Jupyter', 'runtime'));
  } else if (platform === 'win32') {
    if (env.APPDATA) {
      dirs.push(path.join(env.APPDATA, 'jupyter', 'runtime'));
    }
  } else {
    if (env.XDG_RUNTIME_DIR) {
      dirs.push(path.join(env.XDG_RUNTIME_DIR, 'jupyter', 'runtime'));
    }
    if (env.XDG_DATA_HOME) {
      dirs.push(path.join(env.XDG_DATA_HOME, 'jupyter', 'runtime'));
    }
    dirs.push(path.join(home, '.local', 'share', 'jupyter', 'runtime'));
  }
  if (jupyterStorage) {
    dirs.push(...jupyterExtensionRuntimeDirs(jupyterStorage));
  }
  return [...new Set(dirs)];
}

/** The `<storage>/version-<v>/jupyter/runtime` folders of the Jupyter extension (its fallback runtime dirs). */
export function jupyterExtensionRuntimeDirs(storage: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(storage);
  } catch {
    return [];
  }
  return names
    .filter((n) => n.startsWith('version-'))
    .sort()
    .map((n) => path.join(storage, n, 'jupyter', 'runtime'));
}

/** `kernel-*.json` files in the given directories, newest first. Missing directories are skipped. */
export function listConnectionFiles(dirs: string[]): ConnectionFile[] {
  const out: ConnectionFile[] = [];
  for (const dir of dirs) {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      if (!/^kernel-?.*\.json$/.test(name)) {
        continue;
      }
      const full = path.join(dir, name);
      try {
        out.push({ path: full, mtimeMs: fs.statSync(full).mtimeMs });
      } catch {
        // vanished between readdir and stat
      }
    }
  }
  return out.sort((a, b) => b.mtimeMs - a.mtimeMs);
}
