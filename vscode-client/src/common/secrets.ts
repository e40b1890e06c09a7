/**
 * API keys live in VS Code's SecretStorage, one entry per provider environment variable
 * (OPENAI_API_KEY, ...), and reach the server only through its process environment.
 */
import * as vscode from 'vscode';
import { registerSecretValue } from './log';

export interface Provider {
  label: string;
  envVar: string;
}

export const PROVIDERS: readonly Provider[] = [
  { label: 'OpenAI', envVar: 'OPENAI_API_KEY' },
  { label: 'Anthropic', envVar: 'ANTHROPIC_API_KEY' },
  { label: 'Google Gemini', envVar: 'GEMINI_API_KEY' },
];

/** Names of stored keys (not their values), so custom providers survive restarts. */
const INDEX_KEY = 'crane.secretNames';
const ENV_VAR_RE = /^[A-Z][A-Z0-9_]*$/;

export function isValidEnvVarName(name: string): boolean {
  return ENV_VAR_RE.test(name);
}

export class ApiKeyStore {
  constructor(
    private readonly secrets: vscode.SecretStorage,
    private readonly state: vscode.Memento,
  ) {}

  names(): string[] {
    const stored = this.state.get<string[]>(INDEX_KEY, []) ?? [];
    const all = new Set<string>([...PROVIDERS.map((p) => p.envVar), ...stored]);
    return [...all];
  }

  async set(envVar: string, value: string): Promise<void> {
    if (!isValidEnvVarName(envVar)) {
      throw new Error(`"${envVar}" is not an environment variable name`);
    }
    registerSecretValue(value);
    await this.secrets.store(envVar, value);
    const stored = new Set(this.state.get<string[]>(INDEX_KEY, []) ?? []);
    stored.add(envVar);
    await this.state.update(INDEX_KEY, [...stored]);
  }

  async delete(envVar: string): Promise<void> {
    await this.secrets.delete(envVar);
    const stored = (this.state.get<string[]>(INDEX_KEY, []) ?? []).filter((n) => n !== envVar);
    await this.state.update(INDEX_KEY, stored);
  }

  async has(envVar: string): Promise<boolean> {
    return Boolean(await this.secrets.get(envVar));
  }

  /** The environment variables to add to the server process. Values are registered for log redaction. */
  async environment(): Promise<Record<string, string>> {
    const env: Record<string, string> = {};
    for (const name of this.names()) {
      const value = await this.secrets.get(name);
      if (value) {
        registerSecretValue(value);
        env[name] = value;
      }
    }
    return env;
  }
}

/** The server process environment: the extension host's, plus the stored keys (stored keys win). */
export function serverEnvironment(
  base: NodeJS.ProcessEnv,
  keys: Record<string, string>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) {
    if (v !== undefined) {
      env[k] = v;
    }
  }
  Object.assign(env, keys);
  env.PYTHONUNBUFFERED = '1';
  return env;
}

/** The Jupyter Server token's variable: the server process reads it (as `crane --server` does). */
export const JUPYTER_TOKEN_VAR = 'JUPYTER_TOKEN';

/** The "CRANE: Set Jupyter server token" flow. True when the stored token changed. */
export async function promptForJupyterToken(store: ApiKeyStore): Promise<boolean> {
  const value = await vscode.window.showInputBox({
    title: 'CRANE: Jupyter server token',
    prompt:
      'The token of the server in crane.jupyterServer.url (JupyterHub: an API token from /hub/token). ' +
      'Stored in VS Code secret storage. Leave empty to delete it.',
    password: true,
    ignoreFocusOut: true,
  });
  if (value === undefined) {
    return false;
  }
  if (value.trim() === '') {
    await store.delete(JUPYTER_TOKEN_VAR);
    void vscode.window.showInformationMessage('CRANE: Jupyter server token deleted from secret storage.');
  } else {
    await store.set(JUPYTER_TOKEN_VAR, value.trim());
    void vscode.window.showInformationMessage('CRANE: Jupyter server token stored in secret storage.');
  }
  return true;
}

/** The "CRANE: Set API key" flow. Returns the variable that changed, or undefined when cancelled. */
export async function promptForApiKey(store: ApiKeyStore): Promise<string | undefined> {
  const items: (vscode.QuickPickItem & { envVar?: string })[] = [];
  for (const name of store.names().filter((n) => n !== JUPYTER_TOKEN_VAR)) {
    const provider = PROVIDERS.find((p) => p.envVar === name);
    items.push({
      label: provider ? provider.label : name,
      description: name,
      detail: (await store.has(name)) ? 'stored' : 'not set',
      envVar: name,
    });
  }
  items.push({ label: 'Other provider…', description: 'enter the environment variable name' });
  const picked = await vscode.window.showQuickPick(items, {
    title: 'CRANE: Set API key',
    placeHolder: 'Which provider key? (stored in VS Code secret storage, passed to the server as an environment variable)',
  });
  if (!picked) {
    return undefined;
  }
  let envVar = picked.envVar;
  if (!envVar) {
    envVar = await vscode.window.showInputBox({
      title: 'CRANE: API key variable',
      prompt: 'Environment variable name the model provider reads, e.g. MISTRAL_API_KEY',
      validateInput: (v) => (isValidEnvVarName(v) ? undefined : 'Use upper case letters, digits and _'),
    });
    if (!envVar) {
      return undefined;
    }
  }
  const value = await vscode.window.showInputBox({
    title: `CRANE: ${envVar}`,
    prompt: 'Paste the API key. Leave empty to delete the stored key.',
    password: true,
    ignoreFocusOut: true,
  });
  if (value === undefined) {
    return undefined;
  }
  if (value.trim() === '') {
    await store.delete(envVar);
    void vscode.window.showInformationMessage(`CRANE: ${envVar} deleted from secret storage.`);
  } else {
    await store.set(envVar, value.trim());
    void vscode.window.showInformationMessage(`CRANE: ${envVar} stored in secret storage.`);
  }
  return envVar;
}
