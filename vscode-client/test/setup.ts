/** Routes CommonJS `require('vscode')` (e.g. inside vscode-languageclient) to the mock. */
import Module from 'node:module';
import * as mockVscode from './vscode.mock';

type Loader = (request: string, parent: unknown, isMain: boolean) => unknown;
const mod = Module as unknown as { _load: Loader };
const original = mod._load;
mod._load = function (request: string, parent: unknown, isMain: boolean) {
  if (request === 'vscode') {
    return mockVscode;
  }
  return original.call(this, request, parent, isMain);
};
