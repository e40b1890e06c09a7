import { beforeEach, describe, expect, it, vi } from 'vitest';
import { mock, window } from '../vscode.mock';
import { redact, resetLogForTests, traceInfo } from '../../src/common/log';
import { ApiKeyStore, promptForApiKey, serverEnvironment } from '../../src/common/secrets';

function fakeSecrets() {
  const data = new Map<string, string>();
  return {
    data,
    get: vi.fn(async (k: string) => data.get(k)),
    store: vi.fn(async (k: string, v: string) => void data.set(k, v)),
    delete: vi.fn(async (k: string) => void data.delete(k)),
    onDidChange: vi.fn(),
  };
}
function fakeMemento() {
  const data = new Map<string, unknown>();
  return { get: (k: string, d?: unknown) => data.get(k) ?? d, update: async (k: string, v: unknown) => void data.set(k, v), keys: () => [...data.keys()] };
}

describe('API keys', () => {
  beforeEach(() => {
    mock.reset();
    resetLogForTests();
  });

  it('stores keys in SecretStorage by env var name and passes them to the server environment', async () => {
    const secrets = fakeSecrets();
    const store = new ApiKeyStore(secrets as never, fakeMemento() as never);
    await store.set('OPENAI_API_KEY', 'sk-test-1234567890');
    await store.set('MISTRAL_API_KEY', 'mk-abcdef');
    expect(secrets.data.get('OPENAI_API_KEY')).toBe('sk-test-1234567890');
    expect(store.names()).toEqual(expect.arrayContaining(['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'GEMINI_API_KEY', 'MISTRAL_API_KEY']));
    const env = serverEnvironment({ PATH: '/bin', OPENAI_API_KEY: 'old' }, await store.environment());
    expect(env).toMatchObject({ PATH: '/bin', OPENAI_API_KEY: 'sk-test-1234567890', MISTRAL_API_KEY: 'mk-abcdef' });
    await store.delete('MISTRAL_API_KEY');
    expect(await store.environment()).toEqual({ OPENAI_API_KEY: 'sk-test-1234567890' });
    await expect(store.set('bad name', 'x')).rejects.toThrow();
  });

  it('never logs a key value', async () => {
    const store = new ApiKeyStore(fakeSecrets() as never, fakeMemento() as never);
    await store.set('ANTHROPIC_API_KEY', 'sk-ant-secret-value');
    traceInfo('env dump ANTHROPIC_API_KEY=sk-ant-secret-value');
    expect(mock.logChannel.lines.join('\n')).not.toContain('sk-ant-secret-value');
    expect(redact('x sk-ant-secret-value y')).toBe('x *** y');
  });

  it('the Set API key flow uses a password box and can delete a key', async () => {
    const secrets = fakeSecrets();
    const store = new ApiKeyStore(secrets as never, fakeMemento() as never);
    window.showQuickPick.mockImplementationOnce(async (items: any) => items[0]);
    window.showInputBox.mockResolvedValueOnce('  sk-new  ');
    expect(await promptForApiKey(store)).toBe('OPENAI_API_KEY');
    expect(window.showInputBox.mock.calls[0][0]).toMatchObject({ password: true });
    expect(secrets.data.get('OPENAI_API_KEY')).toBe('sk-new');
    window.showQuickPick.mockImplementationOnce(async (items: any) => items[0]);
    window.showInputBox.mockResolvedValueOnce('');
    await promptForApiKey(store);
    expect(secrets.data.has('OPENAI_API_KEY')).toBe(false);
    window.showQuickPick.mockResolvedValueOnce(undefined);
    expect(await promptForApiKey(store)).toBeUndefined();
  });
});
