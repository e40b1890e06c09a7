import { defineConfig } from 'vitest/config';

// The wire test spawns the real Python server (`python -m crane serve`) and speaks LSP to it.
export default defineConfig({
  test: {
    include: ['test/wire/**/*.test.ts'],
    environment: 'node',
    // (the harness's waits scale with CRANE_TEST_TIMEOUT_SCALE, default 3: test/wire/harness.ts)
    testTimeout: 60_000 * (Number(process.env.CRANE_TEST_TIMEOUT_SCALE ?? '3') || 3),
    hookTimeout: 60_000 * (Number(process.env.CRANE_TEST_TIMEOUT_SCALE ?? '3') || 3),
    fileParallelism: false,
  },
});
