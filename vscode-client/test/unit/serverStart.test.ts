import { beforeEach, describe, expect, it, vi } from 'vitest';
import { mock } from '../vscode.mock';

const constructed = vi.fn();
vi.mock('vscode-languageclient/node', () => ({
  LanguageClient: class {
    constructor() {
      constructed();
    }
  },
  State: { Stopped: 1, Starting: 3, Running: 2 },
}));

import { ServerHooks, ServerManager } from '../../src/common/server';

function hooks(own: ServerHooks['ownEnvironment']): ServerHooks & { state: ReturnType<typeof vi.fn> } {
  return {
    state: vi.fn(),
    kernelStatus: vi.fn(),
    diagnosis: vi.fn(),
    agentStep: vi.fn(),
    progress: vi.fn(),
    executeCommand: vi.fn(),
    started: vi.fn(),
    secretEnvironment: async () => ({}),
    ownEnvironment: own,
  } as never;
}

describe('which Python starts the server', () => {
  beforeEach(() => {
    mock.reset();
    constructed.mockClear();
  });

  it("uses the extension's own environment when crane.python is empty, and stops on its failure", async () => {
    const own = vi.fn(async () => 'CRANE needs Python 3.10 or newer to run its server, and found none');
    const h = hooks(own);
    await new ServerManager(h).restart('test');
    expect(own).toHaveBeenCalledTimes(1);
    expect(h.state).toHaveBeenCalledWith('starting', 'preparing the server environment');
    expect(h.state).toHaveBeenLastCalledWith('error', expect.stringMatching(/found none/));
    expect(constructed).not.toHaveBeenCalled();
  });

  it('crane.python overrides it: the environment is not even looked at', async () => {
    mock.config['crane.python'] = '/definitely/not/here/python3';
    const own = vi.fn();
    const h = hooks(own);
    await new ServerManager(h).restart('test');
    expect(own).not.toHaveBeenCalled();
    expect(h.state).toHaveBeenLastCalledWith(
      'error',
      expect.stringMatching(/"\/definitely\/not\/here\/python3" was not found/),
      '/definitely/not/here/python3 (setting)',
    );
    expect(constructed).not.toHaveBeenCalled();
  });
});
