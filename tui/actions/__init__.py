"""The app's actions by feature, as mixins of SlmDvfsApp: experiments (and the selector's
preview), sweeps (and selector training), and the store's history. Each runs its engine
call in a thread worker and hears back through the Messages in tui.messages."""
