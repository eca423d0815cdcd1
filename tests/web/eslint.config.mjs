// ESLint for the dashboard (web/js): plain browser ES modules, no build step. The recommended
// rules, plus the ones that catch what review found: shadowed globals (a local named `window`),
// unused code, loose equality, reassigned-but-const bindings.
import js from '@eslint/js';
import globals from 'globals';

export default [
  {
    files: ['web/js/**/*.js'],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: 'module',
      globals: { ...globals.browser, uPlot: 'readonly' },
    },
    rules: {
      ...js.configs.recommended.rules,
      'no-shadow': ['error', { builtinGlobals: true, hoist: 'all', allow: ['name', 'status', 'top', 'event', 'length', 'parent', 'self', 'close', 'open', 'stop', 'find', 'print', 'origin', 'history', 'external', 'screen'] }],
      'no-unused-vars': ['error', { args: 'after-used', caughtErrors: 'none' }],
      eqeqeq: ['error', 'always'],
      'prefer-const': 'error',
      'no-var': 'error',
      'no-implicit-globals': 'error',
      'max-lines-per-function': ['error', { max: 120, skipBlankLines: true, skipComments: true }],
    },
  },
];
