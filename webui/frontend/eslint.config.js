// ESLint flat config: the recommended JavaScript, TypeScript and Vue 3 rules. Types are
// checked by vue-tsc (npm run typecheck); this catches what the compiler does not.
import js from '@eslint/js'
import vue from 'eslint-plugin-vue'
import globals from 'globals'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  ...vue.configs['flat/essential'],
  {
    files: ['**/*.{ts,vue}'],
    languageOptions: {
      globals: globals.browser,
      parserOptions: { parser: tseslint.parser, extraFileExtensions: ['.vue'], sourceType: 'module' },
    },
  },
  { files: ['public/sw.js'], languageOptions: { globals: globals.serviceworker } },
)
