"""The site operator: SWIM task, controllers, scrape loop and overlay renderer."""
