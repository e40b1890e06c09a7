/** Candidate kernel connection files for "CRANE: Attach to kernel…" (the runtime dirs VS Code and Jupyter use). */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export interface ConnectionFile {
  path: string;
  mtimeMs: number;
}

/** Jupyter runtime directories, in the order VS Code's Jupyter extension and jupyter_core look. */
export function runtimeDirs(
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
  home: string = os.homedir(),
): string[] {
  const dirs: string[] = [];
  if (env.JUPYTER_RUNTIME_DIR) {
    dirs.push(env.JUPYTER_RUNTIME_DIR);
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
    const dataHome = env.XDG_DATA_HOME || path.join(home, '.local', 'share');
    dirs.push(path.join(dataHome, 'jupyter', 'runtime'));
  }
  return [...new Set(dirs)];
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
