"""The CronJob controller: Jobs made from a CronJob's template on its schedule."""
