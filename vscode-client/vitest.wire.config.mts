import { defineConfig } from 'vitest/config';

// The wire test spawns the real Python server (`python -m crane serve`) and speaks LSP to it.
export default defineConfig({
  test: {
    include: ['test/wire/**/*.test.ts'],
    environment: 'node',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    fileParallelism: false,
  },
});
