import { readdirSync } from 'node:fs';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

/** One Vitest project per workspace package folder (packages/*, examples/*, bench). */
const folders = ['packages', 'examples'].flatMap((parent) =>
  readdirSync(new URL(`./${parent}/`, import.meta.url), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => ({ name: entry.name, root: `${parent}/${entry.name}` })),
);
folders.push({ name: 'bench', root: 'bench' });

const projects = folders.map(({ name, root }) => ({
  extends: true as const,
  test: { name, root, include: ['src/**/*.test.ts'] },
}));
// deploy/image/build.sh's test: builds the image and runs the daemon inside it.
projects.push({
  extends: true,
  test: { name: 'image', root: 'deploy/image', include: ['*.test.ts'] },
});

export default defineConfig({
  // Workspace packages resolve to their TypeScript sources (package.json "exports" → "@userspace-proxy/source").
  ssr: { resolve: { conditions: ['@userspace-proxy/source', ...defaultServerConditions] } },
  test: {
    reporters: ['default', './scripts/summary-reporter.ts'],
    projects,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
