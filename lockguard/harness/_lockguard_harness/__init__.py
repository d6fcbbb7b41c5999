"""The harness's modules, in one package whose name no user module has.

run.py imports this package and then takes its own folder off sys.path: a user script's
`import common` or `import gen` finds the user's module, and the modules here import one another
relatively, through the package, so they never pick up a user's module of the same name.
"""
